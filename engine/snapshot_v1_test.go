package engine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreLayout1: snapshots of layout 1, written by the build before
// incremental checkpoints (testdata/layout1: every golden case cut at half
// its input), restore into a task that goes on exactly as one that read the
// whole input, and ask for a full checkpoint next (NeedsBase).
func TestRestoreLayout1(t *testing.T) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			snap := filepath.Join("testdata/layout1", name+".snap")
			if _, err := os.Stat(snap); errors.Is(err, fs.ErrNotExist) {
				t.Skip("a case added after layout 2: no build writes layout 1 any more")
			}
			rs := loadRuleset(t, filepath.Join(dir, "rules.yaml"))
			lines := readLines(t, filepath.Join(dir, "events.ndjson"))
			cut := len(lines) / 2
			a := newRunner(t, rs)
			a.feed(lines[:cut], 0)
			a.out.Reset()
			a.feed(lines[cut:], cut)
			a.task.Finish()

			b := newRunner(t, rs)
			if err := b.task.Restore(mustRead(t, snap)); err != nil {
				t.Fatal(err)
			}
			if !b.task.NeedsBase() {
				t.Error("a layout 1 restore does not ask for a full checkpoint")
			}
			b.feed(lines[cut:], cut)
			b.task.Finish()
			if a.out.String() != b.out.String() {
				t.Fatalf("outputs after the restore differ:\n%s", firstDiff(a.out.String(), b.out.String()))
			}
			if sa, sb := a.task.Stats(), b.task.Stats(); sa != sb {
				t.Fatalf("stats differ:\n%+v\n%+v", sa, sb)
			}
		})
	}
}
