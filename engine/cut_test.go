package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
)

// TestIncrementalCheckpoints: a tracked task cut at random points, its cuts
// encoded a record at a time while it goes on processing (so that keys it
// changes before their record is encoded go through touch), gives deltas
// whose merge is, byte for byte, the full snapshot taken at the last cut.
// With TestSnapshotRestore, a task restored from a chain therefore goes on
// exactly as the original. Every golden case, and the gen workload.
func TestIncrementalCheckpoints(t *testing.T) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases in ../replay/testdata/replay")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			rs := loadRuleset(t, filepath.Join(dir, "rules.yaml"))
			lines := readLines(t, filepath.Join(dir, "events.ndjson"))
			for seed := range uint64(8) {
				checkChain(t, rs, lines, seed, 1+int(seed%4))
			}
		})
	}
	// Several keys, so that a watermark one key's event moves drops
	// another key's join elements and windows (through Watch).
	t.Run("join_keys", func(t *testing.T) {
		rs := loadRuleset(t, "../replay/testdata/replay/join/rules.yaml")
		rng := rand.New(rand.NewPCG(5, 5))
		var lines []string
		for i := range 600 {
			lines = append(lines, fmt.Sprintf(`{"stream":%q,"value":{"k":%q,"ts":%d}}`,
				[]string{"green", "orange"}[rng.IntN(2)], string(rune('a'+rng.IntN(6))), i+rng.IntN(8)))
		}
		for seed := range uint64(6) {
			checkChain(t, rs, lines, seed, 1+int(seed)*7)
		}
	})
	t.Run("gen", func(t *testing.T) {
		rs := loadRuleset(t, "../examples/fraud.yaml")
		var buf bytes.Buffer
		if _, err := workload.Generate(&buf, workload.Config{Users: 300, Events: 20000, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		for seed := range uint64(3) {
			checkChain(t, rs, lines, seed, 1500)
		}
	})
}

// checkChain feeds lines to a tracked task, cutting about every gap lines;
// each cut's records are encoded stepping one record per line processed.
// After every completed cut the chain so far must merge to the full
// snapshot taken at that cut, and restore to a task whose snapshot is the
// same. A few of those restored tasks go on with the rest of the lines
// beside the original and must write what it writes, byte for byte (the
// restore plays the ids' changes on its tables, where a merge rewrites
// lists: the two must expire the same ids later).
func checkChain(t *testing.T, rs *rules.Ruleset, lines []string, seed uint64, gap int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	r := newRunner(t, rs)
	r.task.Track()
	var (
		chain [][]byte
		cut   *Cut
		want  []byte // the full snapshot at cut
		// the lines fed and the original's output at cut
		cutLine, cutOut int
	)
	type resumed struct {
		r     *runner
		outAt int // r's output is the original's from here
		from  int // the line it resumed at
	}
	var going []resumed
	finish := func(at int) {
		b, err := cut.Bytes()
		if err != nil {
			t.Fatalf("seed %d line %d: %v", seed, at, err)
		}
		chain = append(chain, b)
		merged, err := MergeSnapshots(chain)
		if err != nil {
			t.Fatalf("seed %d line %d: merge of %d: %v", seed, at, len(chain), err)
		}
		if !bytes.Equal(merged, want) {
			t.Fatalf("seed %d line %d: the merge of %d cuts differs from the full snapshot (%d vs %d bytes)",
				seed, at, len(chain), len(merged), len(want))
		}
		cut = nil
		if at < len(lines) && len(going) < 3 && rng.IntN(3) == 0 {
			b := newRunner(t, rs)
			if err := b.task.RestoreChain(chain); err != nil {
				t.Fatalf("seed %d line %d: restore of a chain of %d: %v", seed, at, len(chain), err)
			}
			b.feed(lines[cutLine:at], cutLine) // to where the original is
			going = append(going, resumed{b, cutOut, cutLine})
		}
	}
	for i := 0; i <= len(lines); i++ {
		if cut != nil && r.task.step(func(int) bool { return true }) {
			finish(i)
		}
		if cut == nil && rng.IntN(gap) == 0 {
			var err error
			if want, err = r.task.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if cut, err = r.task.Cut(); err != nil {
				t.Fatal(err)
			}
			cutLine, cutOut = i, r.out.Len()
		}
		if i < len(lines) {
			r.feed(lines[i:i+1], i)
			for _, g := range going {
				g.r.feed(lines[i:i+1], i)
			}
		}
	}
	if cut != nil {
		r.task.Step(0)
		finish(len(lines))
	}
	if len(going) > 0 {
		r.task.Finish()
		for _, g := range going {
			g.r.task.Finish()
			if want := r.out.Bytes()[g.outAt:]; !bytes.Equal(g.r.out.Bytes(), want) {
				t.Fatalf("seed %d: a task restored from the chain at line %d wrote other outputs after it (%d vs %d bytes)",
					seed, g.from, g.r.out.Len(), len(want))
			}
		}
	}
	if len(chain) == 0 {
		return
	}
	b := newRunner(t, rs)
	if err := b.task.RestoreChain(chain); err != nil {
		t.Fatalf("seed %d: restore of a chain of %d: %v", seed, len(chain), err)
	}
	got, err := b.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("seed %d: the task restored from the chain snapshots other bytes", seed)
	}
}

// TestSwitchNeedsBase: a task restored from state written under another
// ruleset version (a switch) needs a full checkpoint before its first delta,
// even once tracked: a delta under the new layout on the old version's chain
// would not merge, and a compaction or restore of that chain would fail.
// Base takes that checkpoint, and the deltas after it merge onto it.
func TestSwitchNeedsBase(t *testing.T) {
	const doc = `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
rules:
  busy: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 2', reason: '%s'}
`
	line := `{"stream":"tx","value":{"tx_id":"t%d","user_id":"u%d","ts":%d}}`
	a := newRunner(t, mustLoad(t, fmt.Sprintf(doc, "before")))
	a.task.Track()
	a.feed([]string{fmt.Sprintf(line, 1, 1, 1000), fmt.Sprintf(line, 2, 2, 2000)}, 0)
	data, err := a.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	b := newRunner(t, mustLoad(t, fmt.Sprintf(doc, "after")))
	if err := b.task.Restore(data); err != nil {
		t.Fatal(err)
	}
	b.task.Track()
	if !b.task.NeedsBase() {
		t.Fatal("a task restored under another version no longer needs a base once tracked")
	}
	base, err := b.task.Base()
	if err != nil {
		t.Fatal(err)
	}
	if b.task.NeedsBase() {
		t.Fatal("NeedsBase after Base")
	}
	b.feed([]string{fmt.Sprintf(line, 3, 1, 3000)}, 2)
	c, err := b.task.Cut()
	if err != nil {
		t.Fatal(err)
	}
	for !b.task.Step(0) {
	}
	delta, err := c.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MergeSnapshots([][]byte{base, delta}); err != nil {
		t.Fatalf("the base and the delta after it: %v", err)
	}
	if _, err := MergeSnapshots([][]byte{data, delta}); err == nil {
		t.Fatal("a delta merged onto a chain of another version")
	}
}
