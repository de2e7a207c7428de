package engine

import (
	"bytes"
	"path/filepath"
	"testing"
)

// FuzzRestore feeds corrupted task snapshots of the golden cases to Restore
// under the rulesets that wrote them: it must never panic, and a snapshot it
// accepts must be one the restored task writes back and restores again into
// the same bytes (the state it took is one a task can hold).
func FuzzRestore(f *testing.F) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	if len(dirs) == 0 {
		f.Fatal("no golden cases in ../replay/testdata/replay")
	}
	for i, dir := range dirs {
		rs := loadRuleset(f, filepath.Join(dir, "rules.yaml"))
		lines := readLines(f, filepath.Join(dir, "events.ndjson"))
		r := newRunner(f, rs)
		r.feed(lines[:len(lines)/2], 0)
		snap, err := r.task.Snapshot()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), snap)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		rs := loadRuleset(t, filepath.Join(dirs[int(which)%len(dirs)], "rules.yaml"))
		a := newRunner(t, rs)
		if err := a.task.Restore(data); err != nil {
			return
		}
		snap, err := a.task.Snapshot()
		if err != nil {
			t.Fatalf("a restored state does not snapshot: %v", err)
		}
		b := newRunner(t, rs)
		if err := b.task.Restore(snap); err != nil {
			t.Fatalf("a restored task's snapshot does not restore: %v", err)
		}
		again, err := b.task.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap, again) {
			t.Fatal("the snapshot changed through a restore")
		}
		// Keys restore frozen, unread: every one thaws at the maximum
		// watermark, and one that does not decode is counted, not a crash.
		c := newRunner(t, rs)
		if err := c.task.Restore(data); err != nil {
			t.Fatalf("restores once, not twice: %v", err)
		}
		c.task.Finish()
		if s := c.task.Stats(); s.ColdKeys != 0 || (s.ThawErrors > 0) != (c.task.ThawError() != nil) {
			t.Fatalf("after the maximum watermark: %d keys frozen, %d thaw errors (last: %v)", s.ColdKeys, s.ThawErrors, c.task.ThawError())
		}
	})
}
