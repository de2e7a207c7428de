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

func mustSave(t *testing.T, d *Dir, s *Snapshot) {
	t.Helper()
	if err := d.Save(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

func mustLatest(t *testing.T, d *Dir, task int32) *Snapshot {
	t.Helper()
	s, err := d.Latest(t.Context(), task)
	if err != nil {
		t.Fatal(err)
	}
	return s
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

func TestSaveLatest(t *testing.T) {
	d, reports := openTest(t)
	for seq := range uint64(3) {
		mustSave(t, d, snap(1, seq+1))
	}
	if diff := cmp.Diff(snap(1, 3), mustLatest(t, d, 1)); diff != "" {
		t.Errorf("Latest (-want +got):\n%s", diff)
	}
	// A second Dir on the same directory (a restart) sees the same.
	d2, err := OpenDir(d.path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snap(1, 3), mustLatest(t, d2, 1)); diff != "" {
		t.Errorf("Latest after reopen (-want +got):\n%s", diff)
	}
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}

func TestLatestEmpty(t *testing.T) {
	d, _ := openTest(t)
	mustSave(t, d, snap(2, 1))
	if _, err := d.Latest(t.Context(), 1); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("Latest of a task without snapshots = %v, want ErrNoSnapshot", err)
	}
	d2, _ := openTest(t)
	if _, err := d2.Latest(t.Context(), 0); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("Latest of an empty dir = %v, want ErrNoSnapshot", err)
	}
}

func TestKeep(t *testing.T) {
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
	// Other tasks have their own sequence.
	mustSave(t, d, snap(2, 1))
	// A restarted process that did not call Latest is held to the files.
	d2, err := OpenDir(d.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Save(t.Context(), snap(1, 3)); !errors.Is(err, ErrStaleSeq) {
		t.Errorf("Save after reopen = %v, want ErrStaleSeq", err)
	}
	mustSave(t, d2, snap(1, 6))
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

// damageLatest saves seq 1 and 2 of task 1, replaces file 2 with damaged
// bytes, and checks that Latest reports file 2 and returns seq 1, and that
// the task goes on from there.
func damageLatest(t *testing.T, damage func([]byte) []byte) {
	t.Helper()
	d, reports := openTest(t, Keep(2))
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, snap(1, 2))
	p := filepath.Join(d.path, fileName(1, 2))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, damage(b), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = OpenDir(d.path, OnCorrupt(func(file string, err error) {
		*reports = append(*reports, corruptReport{file, err})
	}), Keep(2))
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Latest(t.Context(), 1)
	if err != nil {
		t.Fatalf("Latest = %v, want the previous snapshot", err)
	}
	if diff := cmp.Diff(snap(1, 1), got); diff != "" {
		t.Fatalf("Latest (-want +got):\n%s", diff)
	}
	if len(*reports) != 1 || (*reports)[0].file != p {
		t.Fatalf("OnCorrupt reports = %v, want one for %s", *reports, p)
	}
	var ve *VersionError
	if err := (*reports)[0].err; !errors.Is(err, ErrCorrupt) && !errors.As(err, &ve) {
		t.Fatalf("reported error %v is neither ErrCorrupt nor *VersionError", err)
	}
	// The task resumes from seq 1: its next Save replaces the damaged file.
	mustSave(t, d, snap(1, 2))
	if diff := cmp.Diff(snap(1, 2), mustLatest(t, d, 1)); diff != "" {
		t.Fatalf("Latest after resave (-want +got):\n%s", diff)
	}
}

func TestLatestSkipsTorn(t *testing.T) {
	n := len(Encode(snap(1, 2)))
	for _, size := range []int{0, 1, 8, 9, 12, n / 2, n - 5, n - 4, n - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			damageLatest(t, func(b []byte) []byte { return b[:size] })
		})
	}
	t.Run("appended", func(t *testing.T) {
		damageLatest(t, func(b []byte) []byte { return append(b, 0) })
	})
}

func TestLatestSkipsFlippedByte(t *testing.T) {
	n := len(Encode(snap(1, 2)))
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			damageLatest(t, func(b []byte) []byte { b[i] ^= 0xff; return b })
		})
	}
}

func TestLatestSkipsMisnamed(t *testing.T) {
	// A valid snapshot under another Seq's name is not trusted either.
	damageLatest(t, func([]byte) []byte { return Encode(snap(1, 7)) })
}

func TestLatestUnknownVersion(t *testing.T) {
	damageLatest(t, func(b []byte) []byte {
		b[len(magic)] = FormatVersion + 1
		return reseal(b)
	})
}

func TestLatestAllCorrupt(t *testing.T) {
	d, reports := openTest(t)
	mustSave(t, d, snap(1, 1))
	mustSave(t, d, snap(1, 2))
	for _, seq := range []uint64{1, 2} {
		if err := os.WriteFile(filepath.Join(d.path, fileName(1, seq)), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := d.Latest(t.Context(), 1)
	if want := "state: latest of task 1: none of 2 snapshots verifies: state: corrupt checkpoint"; !errors.Is(err, ErrCorrupt) || err.Error() != want {
		t.Fatalf("Latest = %v, want %q", err, want)
	}
	if errors.Is(err, ErrNoSnapshot) {
		t.Errorf("unreadable snapshots must not look like none: %v", err)
	}
	if len(*reports) != 2 {
		t.Errorf("OnCorrupt reports = %v, want 2", *reports)
	}
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

func TestConcurrentSaves(t *testing.T) {
	d, reports := openTest(t, Keep(2))
	const tasks, saves = 8, 20
	var wg sync.WaitGroup
	for task := range int32(tasks) {
		wg.Go(func() {
			for seq := uint64(1); seq <= saves; seq++ {
				if err := d.Save(context.Background(), snap(task, seq)); err != nil {
					t.Error(err)
					return
				}
				if _, err := d.Latest(context.Background(), task); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var want []string
	for task := range int32(tasks) {
		if diff := cmp.Diff(snap(task, saves), mustLatest(t, d, task), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("task %d (-want +got):\n%s", task, diff)
		}
		want = append(want, fileName(task, saves-1), fileName(task, saves))
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, dirNames(t, d)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if len(*reports) != 0 {
		t.Errorf("unexpected corrupt reports: %v", *reports)
	}
}

func TestLatestCanceled(t *testing.T) {
	d, _ := openTest(t)
	mustSave(t, d, snap(1, 1))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Latest(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Latest with a canceled context = %v", err)
	}
}
