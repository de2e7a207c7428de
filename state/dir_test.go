package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

type corruptReport struct {
	file string
	err  error
}

// openTest opens a Dir in a fresh directory that records OnCorrupt reports.
func openTest(t *testing.T, opts ...Option) (*Dir, *[]corruptReport) {
	t.Helper()
	var reports []corruptReport
	opts = append(opts, OnCorrupt(func(file string, err error) {
		reports = append(reports, corruptReport{file, err})
	}))
	d, err := OpenDir(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d, &reports
}

func snap(task int32, seq uint64) *Snapshot {
	return &Snapshot{
		Task:     task,
		Seq:      seq,
		Offsets:  map[string]int64{fmt.Sprintf("payments/%d", task): int64(seq) * 10},
		Sections: map[string][]byte{"history": []byte(fmt.Sprintf("task %d seq %d", task, seq))},
	}
}

// delta is snap(task, seq) as a delta on parent.
func delta(task int32, seq, parent uint64) *Snapshot {
	s := snap(task, seq)
	s.Parent = parent
	return s
}

func mustSave(t *testing.T, d *Dir, s *Snapshot) {
	t.Helper()
	if err := d.Save(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

func mustChain(t *testing.T, d *Dir, task int32) []*Snapshot {
	t.Helper()
	c, err := d.Chain(t.Context(), task)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantChain checks that Chain returns want (length and contents).
func wantChain(t *testing.T, d *Dir, task int32, want ...*Snapshot) {
	t.Helper()
	got := mustChain(t, d, task)
	if len(got) != len(want) {
		t.Errorf("Chain of task %d has %d elements (seqs %v), want %d (seqs %v)",
			task, len(got), seqs(got), len(want), seqs(want))
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Chain of task %d (-want +got):\n%s", task, diff)
	}
}

func seqs(c []*Snapshot) []uint64 {
	var s []uint64
	for _, e := range c {
		s = append(s, e.Seq)
	}
	return s
}

// reopen opens a second Dir on d's directory (a restart), recording its
// OnCorrupt reports in reports.
func reopen(t *testing.T, d *Dir, reports *[]corruptReport, opts ...Option) *Dir {
	t.Helper()
	opts = append(opts, OnCorrupt(func(file string, err error) {
		*reports = append(*reports, corruptReport{file, err})
	}))
	d2, err := OpenDir(d.path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d2
}

// writeFile replaces the file of task's seq with b.
func writeFile(t *testing.T, d *Dir, task int32, seq uint64, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d.path, fileName(task, seq)), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// names returns the file names of task's seqs, sorted.
func names(task int32, seqs ...uint64) []string {
	var n []string
	for _, s := range seqs {
		n = append(n, fileName(task, s))
	}
	slices.Sort(n)
	return n
}

// wantReports checks that the reports name exactly the files of task's
// seqs, in that order, each with an ErrCorrupt or *VersionError.
func wantReports(t *testing.T, d *Dir, reports []corruptReport, task int32, seqs ...uint64) {
	t.Helper()
	var got, want []string
	for _, r := range reports {
		got = append(got, r.file)
		var ve *VersionError
		if !errors.Is(r.err, ErrCorrupt) && !errors.As(r.err, &ve) {
			t.Errorf("reported error %v is neither ErrCorrupt nor *VersionError", r.err)
		}
	}
	for _, s := range seqs {
		want = append(want, filepath.Join(d.path, fileName(task, s)))
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("OnCorrupt reports (-want +got):\n%s\nreports: %v", diff, reports)
	}
}

func dirNames(t *testing.T, d *Dir) []string {
	t.Helper()
	entries, err := os.ReadDir(d.path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSaveChain(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	wantChain(t, d, 1, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	mustSave(t, d, delta(1, 3, 2))
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1), delta(1, 3, 2))
	// A second Dir on the same directory (a restart) sees the same.
	d2 := reopen(t, d, reports)
	wantChain(t, d2, 1, snap(1, 1), delta(1, 2, 1), delta(1, 3, 2))
	// and goes on from it.
	mustSave(t, d2, delta(1, 4, 3))
	wantChain(t, d2, 1, snap(1, 1), delta(1, 2, 1), delta(1, 3, 2), delta(1, 4, 3))
	// A new base starts a new chain; Seqs may skip.
	mustSave(t, d2, snap(1, 7))
	wantChain(t, d2, 1, snap(1, 7))
	mustSave(t, d2, delta(1, 9, 7))
	wantChain(t, d2, 1, snap(1, 7), delta(1, 9, 7))
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}

func TestChainEmpty(t *testing.T) {
	d, _ := openTest(t)
	mustSave(t, d, snap(2, 1))
	if c, err := d.Chain(t.Context(), 1); !errors.Is(err, ErrNoSnapshot) || c != nil {
		t.Fatalf("Chain of a task without snapshots = %v, %v, want ErrNoSnapshot", c, err)
	}
	d2, _ := openTest(t)
	if _, err := d2.Chain(t.Context(), 0); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("Chain of an empty dir = %v, want ErrNoSnapshot", err)
	}
}

func TestKeep(t *testing.T) {
	// With bases only, every chain is one file.
	for _, keep := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			d, _ := openTest(t, Keep(keep))
			mustSave(t, d, snap(10, 1)) // another task, never pruned by task 1's saves
			for seq := uint64(1); seq <= 8; seq++ {
				mustSave(t, d, snap(1, seq))
			}
			want := []string{fileName(10, 1)}
			for seq := uint64(9 - keep); seq <= 8; seq++ {
				want = append(want, fileName(1, seq))
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, dirNames(t, d)); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeepChains(t *testing.T) {
	// The saves of task 1: bases at 1, 4 and 6, each followed by deltas.
	saves := []*Snapshot{
		snap(1, 1), delta(1, 2, 1), delta(1, 3, 2),
		snap(1, 4), delta(1, 5, 4),
		snap(1, 6), delta(1, 7, 6), delta(1, 8, 7),
	}
	// The task-1 files after each save, by Keep.
	want := map[int][][]uint64{
		1: {{1}, {1, 2}, {1, 2, 3}, {4}, {4, 5}, {6}, {6, 7}, {6, 7, 8}},
		2: {{1}, {1, 2}, {1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}, {4, 5, 6}, {4, 5, 6, 7}, {4, 5, 6, 7, 8}},
	}
	for _, keep := range []int{1, 2} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			d, reports := openTest(t, Keep(keep))
			mustSave(t, d, snap(10, 1)) // another task, never pruned by task 1's saves
			for i, s := range saves {
				mustSave(t, d, s)
				w := append(names(1, want[keep][i]...), fileName(10, 1))
				slices.Sort(w)
				if diff := cmp.Diff(w, dirNames(t, d)); diff != "" {
					t.Fatalf("files after saving seq %d (-want +got):\n%s", s.Seq, diff)
				}
			}
			wantChain(t, d, 1, saves[5:]...)

			// A restarted process learns the chains from the files' headers,
			// when it saves a base without calling Chain
			mustSave(t, reopen(t, d, reports, Keep(keep)), snap(1, 9))
			w := names(1, 9)
			if keep == 2 {
				w = names(1, 6, 7, 8, 9)
			}
			w = append(w, fileName(10, 1))
			slices.Sort(w)
			if diff := cmp.Diff(w, dirNames(t, d)); diff != "" {
				t.Fatalf("files after a restart and a base without Chain (-want +got):\n%s", diff)
			}
			// or after Chain.
			d2 := reopen(t, d, reports, Keep(keep))
			wantChain(t, d2, 1, snap(1, 9))
			mustSave(t, d2, delta(1, 10, 9))
			mustSave(t, d2, snap(1, 11))
			w = names(1, 11)
			if keep == 2 {
				w = names(1, 9, 10, 11)
			}
			w = append(w, fileName(10, 1))
			slices.Sort(w)
			if diff := cmp.Diff(w, dirNames(t, d)); diff != "" {
				t.Fatalf("files after a restart, Chain and a base (-want +got):\n%s", diff)
			}
			if len(*reports) != 0 {
				t.Errorf("unexpected corrupt reports: %v", *reports)
			}
		})
	}
}

func TestKeepDefault(t *testing.T) {
	d, _ := openTest(t)
	for seq := uint64(1); seq <= 12; seq++ {
		if seq%3 == 1 {
			mustSave(t, d, snap(1, seq))
		} else {
			mustSave(t, d, delta(1, seq, seq-1))
		}
	}
	// Bases at 1, 4, 7 and 10: the newest three chains stay.
	if diff := cmp.Diff(names(1, 4, 5, 6, 7, 8, 9, 10, 11, 12), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestOpenDirInvalidKeep(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenDir(dir, Keep(0))
	if want := fmt.Sprintf("state: open %s: Keep(0): must be at least 1", dir); err == nil || err.Error() != want {
		t.Fatalf("OpenDir(Keep(0)) = %v, want %q", err, want)
	}
}

func TestSaveStaleSeq(t *testing.T) {
	d, _ := openTest(t)
	mustSave(t, d, snap(1, 5))
	for _, seq := range []uint64{5, 4, 0} {
		err := d.Save(t.Context(), snap(1, seq))
		want := fmt.Sprintf("state: save task 1 seq %d: state: stale snapshot sequence number (latest is 5)", seq)
		if !errors.Is(err, ErrStaleSeq) || err.Error() != want {
			t.Errorf("Save seq %d = %v, want %q", seq, err, want)
		}
	}
	// A stale delta is refused as stale, whatever its parent.
	if err := d.Save(t.Context(), delta(1, 4, 3)); !errors.Is(err, ErrStaleSeq) || errors.Is(err, ErrBrokenChain) {
		t.Errorf("Save of a stale delta = %v, want ErrStaleSeq", err)
	}
	// Other tasks have their own sequence.
	mustSave(t, d, snap(2, 1))
	// A restarted process that did not call Chain is held to the files.
	d2, err := OpenDir(d.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Save(t.Context(), snap(1, 3)); !errors.Is(err, ErrStaleSeq) {
		t.Errorf("Save after reopen = %v, want ErrStaleSeq", err)
	}
	mustSave(t, d2, snap(1, 6))
}

func TestSaveBrokenChain(t *testing.T) {
	d, reports := openTest(t)
	check := func(d *Dir, s *Snapshot, want string) {
		t.Helper()
		before := dirNames(t, d)
		err := d.Save(t.Context(), s)
		if !errors.Is(err, ErrBrokenChain) || err.Error() != want {
			t.Errorf("Save seq %d parent %d = %v, want %q", s.Seq, s.Parent, err, want)
		}
		if diff := cmp.Diff(before, dirNames(t, d)); diff != "" {
			t.Errorf("a refused Save changed the files (-before +after):\n%s", diff)
		}
	}
	noLatest := func(seq, parent uint64) string {
		return fmt.Sprintf("state: save task 1 seq %d: state: broken snapshot chain (parent %d, "+
			"but no latest snapshot is known: save a base or call Chain first)", seq, parent)
	}
	// No snapshot yet.
	check(d, delta(1, 2, 1), noLatest(2, 1))
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	// A delta must extend the latest snapshot, not an older one or a gap.
	for _, parent := range []uint64{1, 3} {
		check(d, delta(1, 4, parent), fmt.Sprintf(
			"state: save task 1 seq 4: state: broken snapshot chain (parent %d, latest is 2)", parent))
	}
	// A restarted process must learn the chain before extending it.
	d2 := reopen(t, d, reports)
	check(d2, delta(1, 3, 2), noLatest(3, 2))
	wantChain(t, d2, 1, snap(1, 1), delta(1, 2, 1))
	mustSave(t, d2, delta(1, 3, 2))
	// After Chain found nothing restorable, only a base can start over, from
	// any Seq.
	writeFile(t, d2, 1, 1, []byte("junk"))
	d3 := reopen(t, d2, reports)
	if _, err := d3.Chain(t.Context(), 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Chain with a junk base = %v, want ErrCorrupt", err)
	}
	check(d3, delta(1, 4, 3), noLatest(4, 3))
	mustSave(t, d3, snap(1, 1))
	wantChain(t, d3, 1, snap(1, 1))
	// The unrestorable files are gone.
	if diff := cmp.Diff(names(1, 1), dirNames(t, d3)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	// Another task's chain is its own.
	check(d3, delta(2, 2, 1), "state: save task 2 seq 2: state: broken snapshot chain (parent 1, "+
		"but no latest snapshot is known: save a base or call Chain first)")
}

func TestSaveInvalid(t *testing.T) {
	d, _ := openTest(t)
	if err := d.Save(t.Context(), nil); err == nil || err.Error() != "state: save: nil snapshot" {
		t.Errorf("Save(nil) = %v", err)
	}
	if err := d.Save(t.Context(), snap(-1, 1)); err == nil || err.Error() != "state: save: negative task -1" {
		t.Errorf("Save(task -1) = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Save(ctx, snap(1, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Save with a canceled context = %v", err)
	}
	if names := dirNames(t, d); len(names) != 0 {
		t.Errorf("failed Saves left files: %v", names)
	}
}

// damageNewest saves seq 1 (a base) and 2 (a delta on it, or a base) of task
// 1, replaces file 2 with damaged bytes, and checks that a restarted Chain
// reports file 2 and returns the chain of seq 1, and that the task goes on
// from there.
func damageNewest(t *testing.T, damage func([]byte) []byte) {
	t.Helper()
	for _, second := range []*Snapshot{delta(1, 2, 1), snap(1, 2)} {
		d, reports := openTest(t, Keep(2))
		mustSave(t, d, snap(1, 1))
		mustSave(t, d, second)
		p := filepath.Join(d.path, fileName(1, 2))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, 1, 2, damage(b))
		d = reopen(t, d, reports, Keep(2))
		got, err := d.Chain(t.Context(), 1)
		if err != nil {
			t.Fatalf("Chain = %v, want the chain of seq 1", err)
		}
		if diff := cmp.Diff([]*Snapshot{snap(1, 1)}, got); diff != "" {
			t.Fatalf("Chain with seq 2 (parent %d) damaged (-want +got):\n%s", second.Parent, diff)
		}
		wantReports(t, d, *reports, 1, 2)
		// The task resumes from seq 1: its next Save replaces the damaged file.
		mustSave(t, d, delta(1, 2, 1))
		wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1))
	}
}

func TestChainSkipsTorn(t *testing.T) {
	n := len(Encode(delta(1, 2, 1)))
	for _, size := range []int{0, 1, 8, 9, 12, n / 2, n - 5, n - 4, n - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			damageNewest(t, func(b []byte) []byte { return b[:min(size, len(b))] })
		})
	}
	t.Run("appended", func(t *testing.T) {
		damageNewest(t, func(b []byte) []byte { return append(b, 0) })
	})
}

func TestChainSkipsFlippedByte(t *testing.T) {
	n := len(Encode(delta(1, 2, 1)))
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			damageNewest(t, func(b []byte) []byte {
				if i < len(b) {
					b[i] ^= 0xff
				}
				return b
			})
		})
	}
}

func TestChainSkipsMisnamed(t *testing.T) {
	// A valid snapshot under another Seq's name is not trusted either.
	damageNewest(t, func([]byte) []byte { return Encode(delta(1, 7, 1)) })
}

func TestChainSkipsParentNotBelow(t *testing.T) {
	// A delta must be on an older snapshot; seq 2 on itself is a loop.
	damageNewest(t, func([]byte) []byte { return Encode(delta(1, 2, 2)) })
}

func TestChainUnknownVersion(t *testing.T) {
	damageNewest(t, func(b []byte) []byte {
		b[len(magic)] = FormatVersion + 1
		return reseal(b)
	})
}

func TestChainTornNewestDelta(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	mustSave(t, d, delta(1, 3, 2))
	b := Encode(delta(1, 3, 2))
	writeFile(t, d, 1, 3, b[:len(b)-3])
	d = reopen(t, d, reports)
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1))
	wantReports(t, d, *reports, 1, 3)
	// The next delta builds on 2 and replaces the torn file.
	mustSave(t, d, delta(1, 3, 2))
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1), delta(1, 3, 2))
	if diff := cmp.Diff(names(1, 1, 2, 3), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestChainCorruptMiddleDelta(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	for seq := uint64(2); seq <= 5; seq++ {
		mustSave(t, d, delta(1, seq, seq-1))
	}
	writeFile(t, d, 1, 3, []byte("junk"))
	d = reopen(t, d, reports)
	// 5 and 4 need 3; the chain ends just before it. Only 3 is reported.
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1))
	wantReports(t, d, *reports, 1, 3)
	// Seqs may jump; the files above the chain that Chain skipped go.
	mustSave(t, d, delta(1, 6, 2))
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1), delta(1, 6, 2))
	if diff := cmp.Diff(names(1, 1, 2, 6), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	wantReports(t, d, *reports, 1, 3)
}

func TestChainCorruptBase(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	mustSave(t, d, snap(1, 3))
	mustSave(t, d, delta(1, 4, 3))
	mustSave(t, d, delta(1, 5, 4))
	b := Encode(snap(1, 3))
	b[len(b)-1] ^= 1
	writeFile(t, d, 1, 3, b)
	d = reopen(t, d, reports)
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1))
	wantReports(t, d, *reports, 1, 3)
	// A new base; the older chain stays as a fallback, the skipped files go.
	mustSave(t, d, snap(1, 6))
	wantChain(t, d, 1, snap(1, 6))
	if diff := cmp.Diff(names(1, 1, 2, 6), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestChainMissingParent(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	mustSave(t, d, delta(1, 3, 2))
	mustSave(t, d, delta(1, 4, 3))
	if err := os.Remove(filepath.Join(d.path, fileName(1, 2))); err != nil {
		t.Fatal(err)
	}
	d = reopen(t, d, reports)
	// The delta whose parent is missing is reported; its child is not.
	wantChain(t, d, 1, snap(1, 1))
	wantReports(t, d, *reports, 1, 3)
	if err := (*reports)[0].err; err.Error() != "state: corrupt checkpoint: parent seq 2 is missing" {
		t.Errorf("reported error = %q", err)
	}

	// Without the base, nothing restores.
	*reports = nil
	if err := os.Remove(filepath.Join(d.path, fileName(1, 1))); err != nil {
		t.Fatal(err)
	}
	_, err := d.Chain(t.Context(), 1)
	if want := "state: chain of task 1: no chain of its 2 snapshot files restores: state: corrupt checkpoint"; !errors.Is(err, ErrCorrupt) || err.Error() != want {
		t.Fatalf("Chain = %v, want %q", err, want)
	}
	wantReports(t, d, *reports, 1, 3)
}

func TestChainReportsEachFileOnce(t *testing.T) {
	// Bases at 1 and 4; 3 is an orphan (its parent 2 is junk), 6 is junk,
	// and the chains of 7 and 5 go through them.
	d, reports := openTest(t, Keep(5))
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	mustSave(t, d, delta(1, 3, 2))
	mustSave(t, d, snap(1, 4))
	mustSave(t, d, delta(1, 5, 4))
	mustSave(t, d, delta(1, 6, 5))
	mustSave(t, d, delta(1, 7, 6))
	writeFile(t, d, 1, 2, []byte("junk"))
	writeFile(t, d, 1, 6, nil)
	d = reopen(t, d, reports, Keep(5))
	wantChain(t, d, 1, snap(1, 4), delta(1, 5, 4))
	wantReports(t, d, *reports, 1, 6)
	// With 4 broken as well, 3 needs 2, which is junk: only 1 is left.
	*reports = nil
	writeFile(t, d, 1, 4, []byte("junk"))
	wantChain(t, d, 1, snap(1, 1))
	wantReports(t, d, *reports, 1, 6, 4, 2)
}

func TestChainVersion1(t *testing.T) {
	// A file written before deltas existed restores as a one-element chain
	// and can be extended.
	d, reports := openTest(t)
	v1 := encodeVersion(snap(1, 5), 1)
	if v1[len(magic)] != 1 {
		t.Fatalf("not a version 1 file: %x", v1)
	}
	writeFile(t, d, 1, 5, v1)
	wantChain(t, d, 1, snap(1, 5))
	mustSave(t, d, delta(1, 6, 5))
	wantChain(t, d, 1, snap(1, 5), delta(1, 6, 5))
	b, err := os.ReadFile(filepath.Join(d.path, fileName(1, 6)))
	if err != nil {
		t.Fatal(err)
	}
	if b[len(magic)] != FormatVersion {
		t.Errorf("Save wrote version %d, want %d", b[len(magic)], FormatVersion)
	}
	// A new Dir that has not called Chain prunes by the files' headers,
	// version 1 ones too: the chain 5, 6 is the older of the two kept.
	d2 := reopen(t, d, reports, Keep(2))
	mustSave(t, d2, snap(1, 8))
	mustSave(t, reopen(t, d, reports, Keep(2)), snap(1, 9))
	if diff := cmp.Diff(names(1, 8, 9), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}

func TestPruneFollowsChains(t *testing.T) {
	// A crash after a Save's rename and before its pruning can leave a
	// damaged file inside a chain's span; one that looks like a base must
	// not count as one, or pruning would cut the chain it sits in.
	d, reports := openTest(t, Keep(1))
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, delta(1, 2, 1))
	tornBase := Encode(snap(1, 3))
	tornBase = tornBase[:len(tornBase)/2]
	writeFile(t, d, 1, 3, tornBase)
	d = reopen(t, d, reports, Keep(1))
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1))
	wantReports(t, d, *reports, 1, 3)
	mustSave(t, d, delta(1, 4, 2))
	if diff := cmp.Diff(names(1, 1, 2, 4), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	// The crash: file 3 was not deleted.
	writeFile(t, d, 1, 3, tornBase)
	*reports = nil
	d = reopen(t, d, reports, Keep(1))
	wantChain(t, d, 1, snap(1, 1), delta(1, 2, 1), delta(1, 4, 2))
	mustSave(t, d, delta(1, 5, 4))
	if diff := cmp.Diff(names(1, 1, 2, 4, 5), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	// The same for a Dir that saves a base without calling Chain: the older
	// chain is followed through the headers, skipping file 3.
	writeFile(t, d, 1, 3, tornBase)
	d = reopen(t, d, reports, Keep(2))
	mustSave(t, d, snap(1, 6))
	if diff := cmp.Diff(names(1, 1, 2, 4, 5, 6), dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	wantReports(t, d, *reports, 1)
}

func TestChainAllCorrupt(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, snap(1, 2))
	for _, seq := range []uint64{1, 2} {
		writeFile(t, d, 1, seq, []byte("junk"))
	}
	c, err := d.Chain(t.Context(), 1)
	if want := "state: chain of task 1: no chain of its 2 snapshot files restores: state: corrupt checkpoint"; !errors.Is(err, ErrCorrupt) || err.Error() != want || c != nil {
		t.Fatalf("Chain = %v, %v, want %q", c, err, want)
	}
	if errors.Is(err, ErrNoSnapshot) {
		t.Errorf("unreadable snapshots must not look like none: %v", err)
	}
	wantReports(t, d, *reports, 1, 2, 1)
	// Starting over from scratch is allowed and clears the unreadable files.
	mustSave(t, d, snap(1, 1))
	if diff := cmp.Diff([]string{fileName(1, 1)}, dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestSaveRemovesLeftoverTemps(t *testing.T) {
	d, _ := openTest(t)
	for _, name := range []string{"task-1-123.tmp", "task-2-456.tmp", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(d.path, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustSave(t, d, snap(1, 1))
	want := []string{"notes.txt", "task-1-00000000000000000001.ckpt", "task-2-456.tmp"}
	if diff := cmp.Diff(want, dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

// concurrentSnap is save seq of task in TestConcurrentSaves: a base every
// 5 saves, deltas in between.
func concurrentSnap(task int32, seq uint64) *Snapshot {
	if seq%5 == 1 {
		return snap(task, seq)
	}
	return delta(task, seq, seq-1)
}

func TestConcurrentSaves(t *testing.T) {
	d, reports := openTest(t, Keep(2))
	const tasks, saves = 8, 20
	var wg sync.WaitGroup
	for task := range int32(tasks) {
		wg.Go(func() {
			for seq := uint64(1); seq <= saves; seq++ {
				if err := d.Save(context.Background(), concurrentSnap(task, seq)); err != nil {
					t.Error(err)
					return
				}
				c, err := d.Chain(context.Background(), task)
				if err != nil {
					t.Error(err)
					return
				}
				if want := int(seq-1)%5 + 1; len(c) != want || c[len(c)-1].Seq != seq {
					t.Errorf("task %d: Chain after saving seq %d = seqs %v, want %d ending at %d", task, seq, seqs(c), want, seq)
					return
				}
			}
		})
	}
	wg.Wait()
	var want []string
	for task := range int32(tasks) {
		var chain []*Snapshot
		for seq := uint64(16); seq <= saves; seq++ {
			chain = append(chain, concurrentSnap(task, seq))
		}
		wantChain(t, d, task, chain...)
		for seq := uint64(11); seq <= saves; seq++ { // the chains of 11 and 16
			want = append(want, fileName(task, seq))
		}
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}

func TestChainCanceled(t *testing.T) {
	d, _ := openTest(t)
	mustSave(t, d, snap(1, 1))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Chain(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Chain with a canceled context = %v", err)
	}
	// The canceled Chain changed nothing: the Dir still knows seq 1 as the
	// latest from its own Save.
	if err := d.Save(t.Context(), delta(1, 2, 1)); err != nil {
		t.Errorf("Save after a canceled Chain = %v", err)
	}
}

// TestChainSeqZeroBase: a base saved with Seq 0, as Seq numbers were
// allowed to start before chains, restores after a restart.
func TestChainSeqZeroBase(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(2, 0))
	wantChain(t, reopen(t, d, reports), 2, snap(2, 0))
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}
