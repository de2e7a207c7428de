package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
	"github.com/vigil-cep/vigil/stream"
)

// TestColdKeys: a task whose keys are frozen at random between any two
// records — all of them, or some — does exactly what one that never
// freezes does: the same outputs byte for byte, the same snapshots, the
// same deltas from the same cuts, the same views of a key and the same
// stats. Every golden case (windows, lateness, patterns, joins, decisions
// at the watermark), several keys of a join, and the gen workload.
func TestColdKeys(t *testing.T) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases in ../replay/testdata/replay")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			rs := loadRuleset(t, filepath.Join(dir, "rules.yaml"))
			lines := readLines(t, filepath.Join(dir, "events.ndjson"))
			for seed := range uint64(6) {
				checkCold(t, rs, lines, seed, []float64{1, 0.3, 0.05}[seed%3])
			}
		})
	}
	t.Run("join_keys", func(t *testing.T) {
		rs := loadRuleset(t, "../replay/testdata/replay/join/rules.yaml")
		rng := rand.New(rand.NewPCG(5, 5))
		var lines []string
		for i := range 600 {
			lines = append(lines, fmt.Sprintf(`{"stream":%q,"value":{"k":%q,"ts":%d}}`,
				[]string{"green", "orange"}[rng.IntN(2)], string(rune('a'+rng.IntN(6))), i+rng.IntN(8)))
		}
		for seed := range uint64(6) {
			checkCold(t, rs, lines, seed, []float64{1, 0.3, 0.05}[seed%3])
		}
	})
	t.Run("gen", func(t *testing.T) {
		rs := loadRuleset(t, "../examples/fraud.yaml")
		var buf bytes.Buffer
		if _, err := workload.Generate(&buf, workload.Config{Users: 300, Events: 20000, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")[:6000]
		if raceEnabled {
			lines = lines[:1500]
		}
		for seed := range uint64(2) {
			checkCold(t, rs, lines, seed, []float64{0.3, 0.02}[seed])
		}
	})
}

// checkCold runs lines through two tracked tasks, cut at the same lines,
// and freezes each of the second's keys with probability p after every
// line; see TestColdKeys for what must hold.
func checkCold(t *testing.T, rs *rules.Ruleset, lines []string, seed uint64, p float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 23))
	a, b := newRunner(t, rs), newRunner(t, rs)
	a.task.Track()
	b.task.Track()
	b.task.warmLead = 0 // freeze keys however soon they wake: the golden cases span seconds
	var ca, cb *Cut
	froze := 0
	for i := range lines {
		a.feed(lines[i:i+1], i)
		b.feed(lines[i:i+1], i)
		froze += freezeSome(b.task, rng, p)
		switch {
		case ca != nil:
			if a.task.Step(1) || b.task.Step(1) {
				a.task.Step(0)
				b.task.Step(0)
				da, err := ca.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				db, err := cb.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(da, db) {
					t.Fatalf("seed %d line %d: the deltas differ (%d vs %d bytes)", seed, i, len(da), len(db))
				}
				ca, cb = nil, nil
			}
		case rng.IntN(40) == 0:
			var err error
			if ca, err = a.task.Cut(); err != nil {
				t.Fatal(err)
			}
			if cb, err = b.task.Cut(); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(10) == 0 && a.task.keys.len() > 0 {
			key := a.task.allKeys()[rng.IntN(a.task.keys.len())]
			ea, _ := json.Marshal(a.task.Entity(key, service.EntityQuery{}))
			eb, _ := json.Marshal(b.task.Entity(key, service.EntityQuery{}))
			if !bytes.Equal(ea, eb) {
				t.Fatalf("seed %d line %d: key %q is seen otherwise:\n%s\n%s", seed, i, key, ea, eb)
			}
		}
		if rng.IntN(25) == 0 || i == len(lines)-1 {
			sa, err := a.task.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			sb, err := b.task.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sa, sb) {
				t.Fatalf("seed %d line %d: the snapshots differ (%d vs %d bytes)", seed, i, len(sa), len(sb))
			}
		}
	}
	if froze == 0 && p == 1 && len(lines) > 1 {
		t.Fatalf("seed %d: no key was frozen", seed)
	}
	a.task.Finish()
	b.task.Finish()
	if a.out.String() != b.out.String() {
		t.Fatalf("seed %d: outputs differ:\n%s", seed, firstDiff(a.out.String(), b.out.String()))
	}
	sa, sb := a.task.Stats(), b.task.Stats()
	if sb.ColdKeys != 0 {
		t.Fatalf("seed %d: %d keys still frozen after the maximum watermark", seed, sb.ColdKeys)
	}
	sb.ColdBytes = 0
	if sa != sb {
		t.Fatalf("seed %d: stats differ:\n%+v\n%+v", seed, sa, sb)
	}
}

// freezeSome freezes each key task holds with probability p, and returns
// how many it froze.
func freezeSome(task *Task, rng *rand.Rand, p float64) int {
	var some []*keyState
	for ks := range task.keys.all() {
		if rng.Float64() < p {
			some = append(some, ks)
		}
	}
	n := 0
	for _, ks := range some {
		if task.freeze(ks) {
			n++
		}
	}
	return n
}

// TestCool: Cool freezes the keys no change has touched since the epoch it
// is given, and only those; a frozen key an event comes for thaws.
func TestCool(t *testing.T) {
	rs := loadRuleset(t, "../examples/fraud.yaml")
	var buf bytes.Buffer
	if _, err := workload.Generate(&buf, workload.Config{Users: 200, Events: 3000, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	r := newRunner(t, rs)
	r.task.Track()
	r.task.warmLead = 0
	r.feed(lines[:2000], 0)
	cut := func() {
		if _, err := r.task.Cut(); err != nil {
			t.Fatal(err)
		}
		r.task.Step(0)
	}
	cut()
	if !r.task.Cool(0, r.task.Epoch()-1) || r.task.Stats().ColdKeys != 0 {
		t.Fatalf("keys frozen that were changed in the last interval: %+v", r.task.Stats())
	}
	since := r.task.Epoch()
	r.feed(lines[2000:2100], 2000) // touched since: stay
	touched := r.task.dirtyKeys()
	cut()
	for !r.task.Cool(time.Nanosecond, since) {
	}
	s := r.task.Stats()
	if s.ColdKeys == 0 || s.ColdKeys+len(touched) != s.Keys {
		t.Fatalf("%d keys, %d touched in the last interval, %d frozen", s.Keys, len(touched), s.ColdKeys)
	}
	for _, key := range touched {
		if r.task.keys.get(key, keyHash(key)) == nil {
			t.Fatalf("key %q touched in the last interval was frozen", key)
		}
	}
	r.feed(lines[2100:], 2100)
	if s2 := r.task.Stats(); s2.ColdKeys >= s.ColdKeys {
		t.Fatalf("no key thawed: %d frozen before, %d after", s.ColdKeys, s2.ColdKeys)
	}
}

// dirtyKeys returns the keys changed since the last cut, sorted.
func (t *Task) dirtyKeys() []string {
	var keys []string
	for k := range t.dirty {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestColdStore: coldKeys against a map, through random puts, finds,
// removals and wakes, compactions and resizes.
func TestColdStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c coldKeys
	want := map[string]struct {
		rec  string
		wake int64
	}{}
	for step := range 60_000 {
		key := fmt.Sprintf("k%d", rng.IntN(3000))
		h := keyHash(key)
		i := c.find(key, h)
		w, ok := want[key]
		if ok != (i >= 0) {
			t.Fatalf("step %d: %q held %v, found at %d", step, key, ok, i)
		}
		switch {
		case ok && string(c.rec(i)) != w.rec:
			t.Fatalf("step %d: %q holds %q, want %q", step, key, c.rec(i), w.rec)
		case ok && rng.IntN(2) == 0:
			c.remove(i)
			delete(want, key)
		case !ok:
			rec := strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(2000))
			wake := int64(rng.IntN(1000))
			if rng.IntN(5) == 0 {
				wake = stream.MaxTime
			}
			c.put(key, h, []byte(rec), wake, wake, true)
			want[key] = struct {
				rec  string
				wake int64
			}{rec, wake}
		}
		if step%97 == 0 { // the earliest wakes leave in order
			wm := int64(rng.IntN(40))
			for j := c.due(wm); j >= 0; j = c.due(wm) {
				k := string(c.key(j))
				for kk, ww := range want {
					if ww.wake < want[k].wake && kk != k {
						t.Fatalf("step %d: %q due at %d before %q at %d", step, k, want[k].wake, kk, ww.wake)
					}
				}
				if want[k].wake > wm {
					t.Fatalf("step %d: %q due at %d, watermark %d", step, k, want[k].wake, wm)
				}
				c.remove(j)
				delete(want, k)
			}
		}
		if c.len() != len(want) {
			t.Fatalf("step %d: %d held, want %d", step, c.len(), len(want))
		}
	}
	if c.garbage == 0 && c.live == 0 {
		t.Fatal("nothing was stored")
	}
}

// TestThawError: a frozen record that does not decode (restored frozen from
// a checkpoint that passed its checksum, so written so) loses that key's
// state, counted, and the task goes on with the others.
func TestThawError(t *testing.T) {
	rs := loadRuleset(t, "../examples/fraud.yaml")
	var buf bytes.Buffer
	if _, err := workload.Generate(&buf, workload.Config{Users: 50, Events: 2000, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	a := newRunner(t, rs)
	a.feed(lines, 0)
	snap, err := a.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b := newRunner(t, rs)
	if err := b.task.Restore(snap); err != nil {
		t.Fatal(err)
	}
	n := b.task.cold.len()
	if n < 10 {
		t.Fatalf("%d keys restored frozen", n)
	}
	rec := b.task.cold.rec(0)
	rec[len(rec)-1] ^= 0xff // the last byte: past what recordWake reads of a window's or pattern's state
	b.task.Finish()
	s := b.task.Stats()
	if s.ThawErrors != 1 || b.task.ThawError() == nil || s.ColdKeys != 0 {
		t.Fatalf("after one record broken: %d thaw errors (%v), %d keys frozen", s.ThawErrors, b.task.ThawError(), s.ColdKeys)
	}
}

// TestWarm: Warm thaws the frozen keys whose wake is within the lead of the
// watermark, and only those; a key that wakes that soon does not freeze.
func TestWarm(t *testing.T) {
	rs := loadRuleset(t, "../examples/fraud.yaml")
	var buf bytes.Buffer
	if _, err := workload.Generate(&buf, workload.Config{Users: 200, Events: 3000, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	a := newRunner(t, rs)
	a.feed(lines, 0)
	snap, err := a.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b := newRunner(t, rs)
	if err := b.task.Restore(snap); err != nil {
		t.Fatal(err)
	}
	frozen := b.task.cold.len()
	if b.task.Warming() || !b.task.Warm(0) || b.task.cold.len() != frozen {
		t.Fatalf("keys thawed an hour before their window ends: %d of %d left", b.task.cold.len(), frozen)
	}
	// A lead before the median wake (patterns' deadlines, the hour's end).
	var wakes []int64
	for i := range b.task.cold.len() {
		wakes = append(wakes, b.task.cold.ents[i].wake)
	}
	slices.Sort(wakes)
	b.task.wm = wakes[len(wakes)/2] - warmLead
	if !b.task.Warming() {
		t.Fatal("no key to warm a lead before the median wake")
	}
	for !b.task.Warm(time.Nanosecond) {
	}
	for i := range b.task.cold.len() {
		if w := b.task.cold.ents[i].wake; w <= b.task.wm+warmLead {
			t.Fatalf("a key waking at %d left frozen at watermark %d", w, b.task.wm)
		}
	}
	if b.task.cold.len() == frozen {
		t.Fatal("Warm thawed nothing")
	}
	for ks := range b.task.keys.all() {
		if b.task.freeze(ks) {
			t.Fatalf("key %q froze though it wakes within the lead", ks.key)
		}
	}
}
