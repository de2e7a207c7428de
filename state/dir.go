package state

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Backend is where a task's snapshots live. Dir is the file-system one; the
// interface exists so that a disk-spilling or remote backend can take its
// place. Implementations are safe for concurrent use by different tasks.
type Backend interface {
	// Save stores s atomically: after a crash either the previous snapshots
	// or the previous ones plus s are found, never part of s.
	Save(ctx context.Context, s *Snapshot) error
	// Latest returns the newest snapshot of task that verifies, skipping
	// corrupt or torn newer ones; ErrNoSnapshot if the task has none.
	Latest(ctx context.Context, task int32) (*Snapshot, error)
}

var _ Backend = (*Dir)(nil)

// ErrNoSnapshot is returned by Latest when a task has no snapshot at all.
var ErrNoSnapshot = errors.New("state: no snapshot")

// ErrStaleSeq is wrapped by Save when the snapshot's Seq is not above the
// task's latest.
var ErrStaleSeq = errors.New("state: stale snapshot sequence number")

// PruneError is returned by Save when the new snapshot was written durably
// but an old file of the task could not be deleted. The snapshot counts as
// saved; the next Save of the task tries the deletion again.
type PruneError struct {
	File string // the file that could not be deleted
	Err  error
}

// Error names the file and the cause.
func (e *PruneError) Error() string {
	return fmt.Sprintf("state: snapshot saved, but pruning %s failed: %v", e.File, e.Err)
}

// Unwrap returns the cause.
func (e *PruneError) Unwrap() error { return e.Err }

// DefaultKeep is the number of snapshots per task that Dir keeps when no
// Keep option is given.
const DefaultKeep = 3

// Option configures OpenDir.
type Option interface{ apply(*config) }

type config struct {
	keep      int
	onCorrupt func(file string, err error)
}

type keepOpt int

func (k keepOpt) apply(c *config) { c.keep = int(k) }

// Keep sets how many snapshots per task Dir keeps (default DefaultKeep).
// OpenDir refuses k < 1. Keep at least 2 so that a corrupt newest snapshot
// still leaves one to fall back to.
func Keep(k int) Option { return keepOpt(k) }

type onCorruptOpt func(file string, err error)

func (f onCorruptOpt) apply(c *config) { c.onCorrupt = f }

// OnCorrupt sets a function that Latest calls for each snapshot file it
// skips, with the file's path and the reason (an error wrapping ErrCorrupt,
// or a *VersionError). It is called on the goroutine calling Latest, while
// the task is locked: it must not call Dir methods for the same task.
func OnCorrupt(f func(file string, err error)) Option { return onCorruptOpt(f) }

// Dir stores snapshots as files in one directory, named
// task-<task>-<seq, 20 digits>.ckpt. It is safe for concurrent use: calls
// for different tasks run in parallel, calls for the same task one at a
// time. Only one Dir (in one process) may use a directory at a time.
type Dir struct {
	path string
	cfg  config
	mu   struct {
		sync.Mutex
		tasks map[int32]*taskFloor
	}
}

// taskFloor serializes one task's calls and remembers the Seq a new Save
// must exceed, once this Dir has learned it from a Save or a Latest.
type taskFloor struct {
	mu    sync.Mutex
	known bool   // seq and has were set by a Save or Latest of this Dir
	has   bool   // the task has a snapshot
	seq   uint64 // its Seq, if has
}

// OpenDir returns a Dir storing snapshots in path, creating the directory if
// needed. It fails on an invalid option or if path cannot be a directory.
func OpenDir(path string, opts ...Option) (*Dir, error) {
	cfg := config{keep: DefaultKeep}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.keep < 1 {
		return nil, fmt.Errorf("state: open %s: Keep(%d): must be at least 1", path, cfg.keep)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	d := &Dir{path: path, cfg: cfg}
	d.mu.tasks = make(map[int32]*taskFloor)
	return d, nil
}

func (d *Dir) task(task int32) *taskFloor {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.mu.tasks[task]
	if t == nil {
		t = &taskFloor{}
		d.mu.tasks[task] = t
	}
	return t
}

// Save writes s as the task's newest snapshot: to a temporary file in the
// directory, fsynced, renamed to its final name, and the directory fsynced.
// Then it deletes the task's snapshots beyond the last Keep, and any with a
// higher Seq (left only by corrupt files that Latest skipped) and temporary
// files of earlier failed Saves; other tasks' files are untouched.
//
// s.Seq must be above the task's latest Seq: the one of the last Save or
// Latest of this Dir, or else the highest on disk; otherwise Save returns an
// error wrapping ErrStaleSeq. A *PruneError means s was saved. Save does not
// keep s or its maps after it returns.
func (d *Dir) Save(ctx context.Context, s *Snapshot) error {
	if s == nil {
		return errors.New("state: save: nil snapshot")
	}
	if s.Task < 0 {
		return fmt.Errorf("state: save: negative task %d", s.Task)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: save task %d seq %d: %w", s.Task, s.Seq, err)
	}
	t := d.task(s.Task)
	t.mu.Lock()
	defer t.mu.Unlock()

	files, temps, err := d.list(s.Task)
	if err != nil {
		return fmt.Errorf("state: save task %d seq %d: %w", s.Task, s.Seq, err)
	}
	has, floor := t.has, t.seq
	if !t.known && len(files) > 0 {
		has, floor = true, files[len(files)-1].seq
	}
	if has && s.Seq <= floor {
		return fmt.Errorf("state: save task %d seq %d: %w (latest is %d)", s.Task, s.Seq, ErrStaleSeq, floor)
	}
	if err := d.write(s); err != nil {
		return fmt.Errorf("state: save task %d seq %d: %w", s.Task, s.Seq, err)
	}
	t.known, t.has, t.seq = true, true, s.Seq
	return d.prune(files, temps, s.Seq)
}

func (d *Dir) write(s *Snapshot) (err error) {
	f, err := os.CreateTemp(d.path, fmt.Sprintf("task-%d-*.tmp", s.Task))
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	if err := writeSnapshot(w, s); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(d.path, fileName(s.Task, s.Seq))); err != nil {
		return err
	}
	// Until the directory is synced, the rename itself may not survive a
	// crash; the old snapshots are still there if it does not.
	return syncDir(d.path)
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", path, err)
	}
	return nil
}

// prune deletes, of the files listed before saving seq, those with a higher
// Seq, those beyond the newest Keep (counting seq itself), and the temps.
func (d *Dir) prune(files []ckptFile, temps []string, seq uint64) error {
	var doomed []string
	kept := 1 // the snapshot just saved
	for _, f := range slices.Backward(files) {
		switch {
		case f.seq == seq:
			// Replaced by the rename.
		case f.seq < seq && kept < d.cfg.keep:
			kept++
		default:
			doomed = append(doomed, f.name)
		}
	}
	doomed = append(doomed, temps...)
	var first error
	for _, name := range doomed {
		p := filepath.Join(d.path, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = &PruneError{File: p, Err: err}
		}
	}
	return first
}

// Latest returns the task's newest snapshot that decodes and verifies, and
// whose task and Seq match its file name. Each newer file that does not is
// reported to the OnCorrupt function and skipped. It returns ErrNoSnapshot
// if the task has no snapshot file, an error wrapping ErrCorrupt if it has
// some but none verifies, and an I/O error as is. The sections of the
// returned snapshot are the caller's.
func (d *Dir) Latest(ctx context.Context, task int32) (*Snapshot, error) {
	t := d.task(task)
	t.mu.Lock()
	defer t.mu.Unlock()

	files, _, err := d.list(task)
	if err != nil {
		return nil, fmt.Errorf("state: latest of task %d: %w", task, err)
	}
	for _, f := range slices.Backward(files) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("state: latest of task %d: %w", task, err)
		}
		p := filepath.Join(d.path, f.name)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("state: latest of task %d: %w", task, err)
		}
		s, err := Decode(b)
		if err == nil && (s.Task != task || s.Seq != f.seq) {
			err = fmt.Errorf("%w: file holds task %d seq %d", ErrCorrupt, s.Task, s.Seq)
		}
		if err != nil {
			if d.cfg.onCorrupt != nil {
				d.cfg.onCorrupt(p, err)
			}
			continue
		}
		t.known, t.has, t.seq = true, true, s.Seq
		return s, nil
	}
	// Whatever is on disk cannot be restored, so a fresh start may save
	// from any Seq (and its first Save deletes the unreadable files).
	t.known, t.has = true, false
	if len(files) > 0 {
		return nil, fmt.Errorf("state: latest of task %d: none of %d snapshots verifies: %w", task, len(files), ErrCorrupt)
	}
	return nil, ErrNoSnapshot
}

type ckptFile struct {
	name string
	seq  uint64
}

func fileName(task int32, seq uint64) string {
	return fmt.Sprintf("task-%d-%020d.ckpt", task, seq)
}

// list returns the task's snapshot files in increasing Seq order and the
// names of its leftover temporary files.
func (d *Dir) list(task int32) ([]ckptFile, []string, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, nil, err
	}
	prefix := "task-" + strconv.Itoa(int(task)) + "-"
	var files []ckptFile
	var temps []string
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if strings.HasSuffix(rest, ".tmp") {
			temps = append(temps, name)
			continue
		}
		digits, ok := strings.CutSuffix(rest, ".ckpt")
		if !ok || len(digits) != 20 {
			continue
		}
		seq, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			continue
		}
		files = append(files, ckptFile{name: name, seq: seq})
	}
	// ReadDir sorts by name, and the fixed-width Seq makes that Seq order.
	return files, temps, nil
}
