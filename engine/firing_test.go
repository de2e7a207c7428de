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

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// TestSlicedFiring: a task that fires windows in slices (SliceFiring), a
// random few at a time, with the rest drained between records at random
// or caught up by the keys that come, does what one that fires everything
// in each advance does: every output but the window results in the same
// order byte for byte, each key's window results in the same order, the
// same snapshots, deltas, views of a key and stats (docs/design.md "Firing
// in slices"). Half the seeds freeze keys too, so that advances leave keys
// frozen with their windows due (thawDue). Every golden case and the gen
// workload.
func TestSlicedFiring(t *testing.T) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases in ../replay/testdata/replay")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			rs := loadRuleset(t, filepath.Join(dir, "rules.yaml"))
			lines := readLines(t, filepath.Join(dir, "events.ndjson"))
			for seed := range uint64(8) {
				checkSliced(t, rs, lines, seed)
			}
		})
	}
	t.Run("sweep", func(t *testing.T) {
		// Keys whose history expires in jumps of the watermark, forgotten
		// in slices (Task.sweep) while they come again, on time or late
		// (listed afresh in a bucket still owed), or are looked at.
		rs := sweepRuleset(t)
		for seed := range uint64(6) {
			checkSliced(t, rs, sweepLines(seed), seed)
		}
	})
	t.Run("finish", func(t *testing.T) {
		// The end of the input with a backlog left: the advance to the
		// maximum watermark works it off first.
		rs := sweepRuleset(t)
		lines := sweepLines(0)
		a, b := newRunner(t, rs), newRunner(t, rs)
		b.task.SliceFiring()
		b.task.fireInline = 0
		a.feed(lines, 0)
		b.feed(lines, 0)
		if !b.task.Overdue() {
			t.Fatal("no backlog before the end")
		}
		a.task.Finish()
		b.task.Finish()
		sa, err := a.task.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sb, err := b.task.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sa, sb) {
			t.Fatalf("the snapshots at the end differ (%d vs %d bytes)", len(sa), len(sb))
		}
	})
	t.Run("gen", func(t *testing.T) {
		rs := loadRuleset(t, "../examples/fraud.yaml")
		var buf bytes.Buffer
		if _, err := workload.Generate(&buf, workload.Config{Users: 300, Events: 20000, Seed: 3, Rate: 1}); err != nil {
			t.Fatal(err)
		}
		// At an event a second, 6,000 lines cross the hour's end once or twice.
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")[:6000]
		if raceEnabled {
			lines = lines[:1500]
		}
		for seed := range uint64(4) {
			checkSliced(t, rs, lines, seed)
		}
	})
}

// checkSliced runs lines through two tracked tasks, cut at the same lines,
// the second firing in slices; see TestSlicedFiring for what must hold.
func checkSliced(t *testing.T, rs *rules.Ruleset, lines []string, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 29))
	a, b := newRunner(t, rs), newRunner(t, rs)
	a.task.Track()
	b.task.Track()
	b.task.SliceFiring()
	b.task.fireInline = rng.IntN(3)
	b.task.warmLead = 0
	freeze := []float64{0, 0.3, 0, 1}[seed%4] // the share of keys frozen after each line
	var ca, cb *Cut
	overdue := 0
	for i := range lines {
		a.feed(lines[i:i+1], i)
		b.feed(lines[i:i+1], i)
		if b.task.Overdue() {
			overdue++
		}
		if rng.IntN(3) == 0 { // a slice between two records
			n := rng.IntN(4)
			b.task.drain(func() bool { n--; return n >= 0 })
		}
		if freeze > 0 {
			freezeSome(b.task, rng, freeze)
		}
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
			// A key of either task: the second's may be owed to the sweep.
			keys := a.task.allKeys()
			if rng.IntN(2) == 0 {
				keys = b.task.allKeys()
			}
			key := keys[rng.IntN(len(keys))]
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
	a.task.Finish()
	b.task.Finish()
	if b.task.Overdue() {
		t.Fatalf("seed %d: windows overdue after the maximum watermark", seed)
	}
	wa, oa := splitWindowResults(t, a.out.String())
	wb, ob := splitWindowResults(t, b.out.String())
	if oa != ob {
		t.Fatalf("seed %d: outputs other than window results differ:\n%s", seed, firstDiff(oa, ob))
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range wa {
			if !yield(k) {
				return
			}
		}
	})
	if len(wa) != len(wb) {
		t.Fatalf("seed %d: window results for %d keys, %d when sliced", seed, len(wa), len(wb))
	}
	for _, k := range keys {
		if wa[k] != wb[k] {
			t.Fatalf("seed %d: window results of %s differ:\n%s", seed, k, firstDiff(wa[k], wb[k]))
		}
	}
	sa, sb := a.task.Stats(), b.task.Stats()
	sb.ColdBytes = 0
	if sa != sb {
		t.Fatalf("seed %d: stats differ:\n%+v\n%+v", seed, sa, sb)
	}
	t.Logf("seed %d: overdue after %d of %d lines", seed, overdue, len(lines))
}

// splitWindowResults splits a task's output lines into the window results
// of each window and key, in order, and every other line, in order.
func splitWindowResults(t *testing.T, out string) (map[string]string, string) {
	t.Helper()
	wins := make(map[string]string)
	var other strings.Builder
	for line := range strings.SplitSeq(out, "\n") {
		var o struct{ Kind, Window, Key string }
		if line != "" {
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Fatalf("output %q: %v", line, err)
			}
		}
		if o.Kind == KindWindow.String() {
			k := fmt.Sprintf("%s/%s", o.Window, o.Key)
			wins[k] += line + "\n"
			continue
		}
		other.WriteString(line + "\n")
	}
	return wins, other.String()
}

// sweepRuleset keeps two minutes of history: a key whose events are all
// older is forgotten at the next sweep.
func sweepRuleset(t *testing.T) *rules.Ruleset {
	return mustLoad(t, `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
rules:
  again: {stream: tx, action: review, when: 'len(history("tx", "2m")) >= 2'}
`)
}

// sweepLines is four rounds of events ten minutes apart, so that each
// round's keys expire in the next; a quarter of them late, at an older time
// that lists their key in an old bucket.
func sweepLines(seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 31))
	var lines []string
	n := 0
	event := func(user int, ts int64) {
		n++
		lines = append(lines, fmt.Sprintf(`{"stream":"tx","value":{"tx_id":"t%d","user_id":"u%d","ts":%d}}`, n, user, ts))
	}
	for round := range int64(4) {
		base := round * 600_000
		for range 100 {
			u := rng.IntN(80)
			if rng.IntN(4) == 0 {
				event(u, max(0, base-rng.Int64N(600_000)))
			} else {
				event(u, base+rng.Int64N(180_000))
			}
		}
	}
	return lines
}
