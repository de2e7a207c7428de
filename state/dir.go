package state

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Backend is where a task's snapshots live. Dir is the file-system one; the
// interface exists so that a disk-spilling or remote backend can take its
// place. Implementations are safe for concurrent use by different tasks.
type Backend interface {
	// Save stores s atomically: after a crash either the previous snapshots
	// or the previous ones plus s are found, never part of s. A delta
	// (s.Parent != 0) must build on the task's latest snapshot (ErrBrokenChain
	// otherwise), and s.Seq must exceed it (ErrStaleSeq otherwise).
	Save(ctx context.Context, s *Snapshot) error
	// Chain returns the newest restorable chain of task: a base followed by
	// the deltas saved on it, base first, in Seq order, skipping corrupt or
	// torn newer files and the chains that need them; ErrNoSnapshot if the
	// task has none, an error wrapping ErrCorrupt if no chain restores.
	Chain(ctx context.Context, task int32) ([]*Snapshot, error)
}

var _ Backend = (*Dir)(nil)

// ErrNoSnapshot is returned by Chain when a task has no snapshot at all.
var ErrNoSnapshot = errors.New("state: no snapshot")

// ErrStaleSeq is wrapped by Save when the snapshot's Seq is not above the
// task's latest.
var ErrStaleSeq = errors.New("state: stale snapshot sequence number")

// ErrBrokenChain is wrapped by Save when a delta's Parent is not the task's
// latest Seq, so that the delta would not extend the chain the task restores
// from. Nothing is written.
var ErrBrokenChain = errors.New("state: broken snapshot chain")

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

// DefaultKeep is the number of chains (bases, each with the deltas saved on
// it) per task that Dir keeps when no Keep option is given.
const DefaultKeep = 3

// Option configures OpenDir.
type Option interface{ apply(*config) }

type config struct {
	keep      int
	onCorrupt func(file string, err error)
}

type keepOpt int

func (k keepOpt) apply(c *config) { c.keep = int(k) }

// Keep sets how many chains per task Dir keeps (default DefaultKeep): after
// a Save, the newest k bases and every file of their chains stay on disk.
// OpenDir refuses k < 1. Keep at least 2 so that a corrupt base still leaves
// a chain to fall back to (a corrupt delta leaves the chain up to its
// parent whatever k is).
func Keep(k int) Option { return keepOpt(k) }

type onCorruptOpt func(file string, err error)

func (f onCorruptOpt) apply(c *config) { c.onCorrupt = f }

// OnCorrupt sets a function that Chain calls, at most once per call and
// file, for each snapshot file at which a chain breaks: a file that is
// corrupt, torn, of an unknown version or misnamed, or a delta whose parent
// file is missing. It gets the file's path and the reason (an error wrapping
// ErrCorrupt, or a *VersionError). The deltas built on a reported file are
// skipped without a report of their own. It is called on the goroutine
// calling Chain, while the task is locked: it must not call Dir methods for
// the same task.
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
// must exceed (and a delta must build on), once this Dir has learned it from
// a Save or a Chain.
type taskFloor struct {
	mu    sync.Mutex
	known bool   // seq and has were set by a Save or Chain of this Dir
	has   bool   // the task has a restorable snapshot
	seq   uint64 // the Seq of the last element of its chain, if has
	// parents caches the Parent of the task's files whose header this Dir
	// wrote, decoded or read, by Seq, so that pruning does not read the
	// same headers at every Save. Only the files kept by the last Save and
	// those of the last chain returned are in it.
	parents map[uint64]uint64
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
// Then it prunes the task's files (other tasks' files are untouched): it
// keeps the chains of the newest Keep bases, counting the chain s belongs
// to, and deletes older files, files with a Seq above the task's previous
// latest (the damaged files that Chain skipped, or a crash left), files
// inside the span of a kept chain that are not part of it, and temporary
// files of earlier failed Saves.
//
// s.Seq must be above the task's latest Seq: the one of the last Save of
// this Dir or the last element of the chain its last Chain returned, or else
// the highest on disk; otherwise Save returns an error wrapping ErrStaleSeq.
// A delta (s.Parent != 0) must have that latest Seq as its Parent, and this
// Dir must know it (from a Save or a Chain): otherwise Save returns an error
// wrapping ErrBrokenChain. Either way nothing is written. A *PruneError
// means s was saved. Save does not keep s or its maps after it returns.
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
	if s.Parent != 0 {
		switch {
		case !t.known || !t.has:
			// Before a Chain, the highest file on disk may not restore; the
			// task must learn its chain (or start a new one) first.
			return fmt.Errorf("state: save task %d seq %d: %w (parent %d, but no latest snapshot is known: save a base or call Chain first)",
				s.Task, s.Seq, ErrBrokenChain, s.Parent)
		case s.Parent != t.seq:
			return fmt.Errorf("state: save task %d seq %d: %w (parent %d, latest is %d)",
				s.Task, s.Seq, ErrBrokenChain, s.Parent, t.seq)
		}
	}
	if err := d.write(s); err != nil {
		return fmt.Errorf("state: save task %d seq %d: %w", s.Task, s.Seq, err)
	}
	// What this Dir knows to be restorable before s: nothing above the
	// latest (Chain found none of those restorable), or nothing at all.
	known, has, latest := t.known, t.has, t.seq
	restorable := func(seq uint64) bool { return !known || (has && seq <= latest) }
	t.known, t.has, t.seq = true, true, s.Seq
	return d.prune(t, files, temps, s, restorable)
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
	if err := writeSnapshot(w, s, FormatVersion); err != nil {
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

// prune deletes, of the files listed before saving s, all but the chains of
// the newest Keep bases (counting the chain of s), and the temps. Only files
// below s.Seq for which restorable is true can be in a kept chain besides s.
//
// The chains are followed by the Parent in each file's header, read from
// t.parents or from the file without verifying it: a damaged header can
// only make prune keep too much (a broken link ends a chain without counting
// a base) or count a damaged base as one of the Keep, never drop a file of
// the chain of s, whose headers this Dir wrote or verified.
func (d *Dir) prune(t *taskFloor, files []ckptFile, temps []string, s *Snapshot, restorable func(uint64) bool) error {
	var cands []ckptFile // increasing Seq, like files
	for _, f := range files {
		if f.seq < s.Seq && restorable(f.seq) {
			cands = append(cands, f)
		}
	}
	index := make(map[uint64]int, len(cands))
	for i, f := range cands {
		index[f.seq] = i
	}
	parents := map[uint64]uint64{s.Seq: s.Parent}
	kept := make(map[uint64]bool)
	// follow keeps the ancestors of the kept file seq with the given parent
	// and returns the index in cands of the oldest file of the chain (or
	// len(cands) for s alone) and whether the chain reached a base.
	follow := func(seq, parent uint64) (low int, base bool) {
		low = len(cands)
		if i, ok := index[seq]; ok {
			low = i
		}
		for parent != 0 {
			i, ok := index[parent]
			if !ok || i >= low {
				return low, false
			}
			f := cands[i]
			kept[f.seq] = true
			low = i
			p, ok := d.parentOf(t, f)
			if !ok {
				return low, false
			}
			parents[f.seq] = p
			parent = p
		}
		return low, true
	}
	bases := 0
	low, base := follow(s.Seq, s.Parent)
	for {
		if base {
			bases++
		}
		if bases >= d.cfg.keep || low == 0 {
			break
		}
		// The newest file below the chain just kept ends the next chain.
		f := cands[low-1]
		kept[f.seq] = true
		p, ok := d.parentOf(t, f)
		if !ok {
			low, base = low-1, false
			continue
		}
		parents[f.seq] = p
		low, base = follow(f.seq, p)
	}
	t.parents = parents

	var doomed []string
	for _, f := range files {
		if f.seq != s.Seq && !kept[f.seq] { // s replaced the file of its own Seq
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

// parentOf returns the Parent of the file f from the cache, or else from its
// header (unverified); ok is false if the header cannot be read.
func (d *Dir) parentOf(t *taskFloor, f ckptFile) (parent uint64, ok bool) {
	if p, ok := t.parents[f.seq]; ok {
		return p, true
	}
	r, err := os.Open(filepath.Join(d.path, f.name))
	if err != nil {
		return 0, false
	}
	defer r.Close()
	b := make([]byte, maxHeader)
	n, err := io.ReadFull(r, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, false
	}
	seq, parent, ok := peekParent(b[:n])
	if !ok || seq != f.seq {
		return 0, false
	}
	return parent, true
}

// Chain returns the task's newest restorable chain: a base followed by the
// deltas saved on it, base first, each delta's Parent being the Seq of the
// element before it, every element decoded and verified (its task and Seq
// match its file name, and a delta's Parent is below its Seq).
//
// It tries the task's files as the chain's last element from the newest to
// the oldest, following each one's Parent back to a base. A file that does
// not verify, or a delta whose parent file is missing, is reported to the
// OnCorrupt function (once) and breaks every chain through it, so that the
// next older file not yet known to be broken is tried: a damaged newest
// delta falls back to the chain up to its parent, a damaged delta in the
// middle to the chain ending just before it, a damaged base to an older
// chain. Each file is read and decoded at most once per call.
//
// It returns ErrNoSnapshot if the task has no snapshot file, an error
// wrapping ErrCorrupt if it has some but no chain restores, and an I/O or
// context error as is. After it, a Save of the task must have a Seq above
// the last element's (a delta, that element's Seq as Parent). The sections
// of the returned snapshots are the caller's.
func (d *Dir) Chain(ctx context.Context, task int32) ([]*Snapshot, error) {
	t := d.task(task)
	t.mu.Lock()
	defer t.mu.Unlock()

	files, _, err := d.list(task)
	if err != nil {
		return nil, fmt.Errorf("state: chain of task %d: %w", task, err)
	}
	c := chainer{d: d, task: task, files: files,
		index: make(map[uint64]int, len(files)), snaps: make([]*Snapshot, len(files)),
		broken: make([]bool, len(files))}
	for i, f := range files {
		c.index[f.seq] = i
	}
	for i := len(files) - 1; i >= 0; i-- {
		chain, err := c.walk(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("state: chain of task %d: %w", task, err)
		}
		if chain == nil {
			continue
		}
		last := chain[len(chain)-1]
		t.known, t.has, t.seq = true, true, last.Seq
		if t.parents == nil {
			t.parents = make(map[uint64]uint64, len(chain))
		}
		for _, s := range chain {
			t.parents[s.Seq] = s.Parent
		}
		return chain, nil
	}
	// Whatever is on disk cannot be restored, so a fresh start may save a
	// base from any Seq (and its Save deletes the unrestorable files).
	t.known, t.has = true, false
	if len(files) > 0 {
		return nil, fmt.Errorf("state: chain of task %d: no chain of its %d snapshot files restores: %w", task, len(files), ErrCorrupt)
	}
	return nil, ErrNoSnapshot
}

// chainer holds the state of one Chain call.
type chainer struct {
	d      *Dir
	task   int32
	files  []ckptFile
	index  map[uint64]int // Seq -> index in files
	snaps  []*Snapshot    // the decoded files not known to be broken
	broken []bool         // the file is damaged or every chain through it is
}

// walk returns the chain ending at files[i], or nil if it does not restore
// (reporting the file that breaks it, unless it was reported before).
func (c *chainer) walk(ctx context.Context, i int) ([]*Snapshot, error) {
	var path []int // files[i] and its ancestors so far
	for !c.broken[i] {
		s, err := c.load(ctx, i)
		if err != nil {
			return nil, err
		}
		if s == nil {
			break
		}
		path = append(path, i)
		if s.Parent == 0 {
			chain := make([]*Snapshot, len(path))
			for k, j := range path {
				chain[len(path)-1-k] = c.snaps[j]
			}
			return chain, nil
		}
		j, ok := c.index[s.Parent]
		if !ok {
			c.report(i, fmt.Errorf("%w: parent seq %d is missing", ErrCorrupt, s.Parent))
			break
		}
		i = j // below i: load checked Parent < Seq
	}
	// No chain through the files on the path restores.
	for _, j := range path {
		c.broken[j], c.snaps[j] = true, nil
	}
	return nil, nil
}

// load returns files[i] decoded and verified, decoding it on first use, or
// nil after reporting it and marking it broken if it does not verify.
func (c *chainer) load(ctx context.Context, i int) (*Snapshot, error) {
	if s := c.snaps[i]; s != nil {
		return s, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f := c.files[i]
	b, err := os.ReadFile(filepath.Join(c.d.path, f.name))
	if err != nil {
		return nil, err
	}
	s, err := Decode(b)
	switch {
	case err != nil:
	case s.Task != c.task || s.Seq != f.seq:
		err = fmt.Errorf("%w: file holds task %d seq %d", ErrCorrupt, s.Task, s.Seq)
	case !s.ParentBelow():
		err = fmt.Errorf("%w: parent %d is not below seq %d", ErrCorrupt, s.Parent, s.Seq)
	}
	if err != nil {
		c.report(i, err)
		return nil, nil
	}
	c.snaps[i] = s
	return s, nil
}

// report marks files[i] broken and reports it to the OnCorrupt function.
func (c *chainer) report(i int, err error) {
	c.broken[i], c.snaps[i] = true, nil
	if c.d.cfg.onCorrupt != nil {
		c.d.cfg.onCorrupt(filepath.Join(c.d.path, c.files[i].name), err)
	}
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
