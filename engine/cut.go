package engine

import (
	"errors"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vigil-cep/vigil/internal/codec"
)

// Incremental checkpoints (docs/design.md "Checkpoints").
//
// A tracked task (Track) remembers which keys it changed since its last
// checkpoint (dirty), and logs every change to its ids (journal). Cut marks
// a checkpoint: it writes the globals — a few hundred bytes — and takes the
// dirty set and the journal as the checkpoint's own, which costs the same
// at a thousand keys as at a million. The records of those keys, as they
// were at the cut, are then encoded a slice at a time by Step, between the
// batches and requests the task goes on serving; a key the task is about to
// change before Step reached it is encoded first (touch), so every record
// holds the key's state at the cut. The assembly, the sort and the write
// happen on another goroutine (Cut.Bytes).
//
// Why not encode on another goroutine from the start: the operators' key
// maps and buffers are changed in place by the task, so reading them
// concurrently would need copy-on-write in every operator, paid on every
// event. Interleaving costs nothing when no checkpoint runs, and the work it
// interleaves is proportional to what changed.

// Track makes the task record what it changes from now on, so that Cut can
// checkpoint only that. Call it on a task just built or restored: a delta
// then holds every change since the state its chain starts from.
// Track leaves NeedsBase as it is: a task restored from state written under
// another layout (a ruleset switch) still needs a full checkpoint before its
// first delta, which Base takes.
func (t *Task) Track() {
	t.track = true
	t.resetTracking()
	for _, op := range t.windows {
		op.Watch(t.touch)
	}
	for _, jo := range t.joins {
		jo.op.Watch(t.touch)
	}
	for _, s := range t.seen {
		if s != nil {
			s.journal = &t.journal
		}
	}
}

// Base takes a full snapshot that the next deltas extend: a checkpoint's
// base. Tracking starts over from it (Track), and NeedsBase is cleared.
func (t *Task) Base() ([]byte, error) {
	data, err := t.Snapshot()
	if err != nil {
		return nil, err
	}
	t.Track()
	t.needBase = false
	return data, nil
}

// resetTracking forgets what changed: the state is now its own base.
func (t *Task) resetTracking() {
	if !t.track {
		return
	}
	t.epoch++
	t.dirty = make(map[string]struct{})
	t.journal = idJournal{}
}

// touch is called before every change to key's state. On a tracked task,
// while a cut is being encoded, a key it has not encoded yet is encoded now,
// as it is before the change; and the key is recorded as changed. The
// changed set keeps key as it is: the callers pass the key's own string
// (keyState.key, patternKey.key), never a view of an input record.
func (t *Task) touch(key string) {
	if !t.track {
		return
	}
	if c := t.cut; c != nil {
		if _, ok := c.pending[key]; ok {
			c.encode(t, key)
			delete(c.pending, key)
		}
	}
	if _, ok := t.dirty[key]; !ok {
		t.dirty[key] = struct{}{}
	}
}

// Changes is how many changes a tracked task holds for its next checkpoint:
// keys changed and changes to its ids since the last cut. Both take memory
// until the cut takes them (about a hundred bytes each), so a driver that
// checkpoints on a long interval also checkpoints when they pile up.
func (t *Task) Changes() int { return len(t.dirty) + t.journal.n }

// logID journals id's entry, after it was put or changed.
func (t *Task) logID(stream int, id string) {
	if !t.track {
		return
	}
	s := t.seen[stream]
	en, ok := s.get(id)
	if !ok {
		return
	}
	en.pending = nil
	t.journal.add(idChange{kind: idPut, stream: stream, id: id, entry: en, features: s.features[id]})
}

// idChange is one change to a task's ids, in the journal.
type idChange struct {
	kind     uint8 // idPut, idRemove, idClear
	stream   int
	id       string
	entry    seen   // idPut: the entry as it is after the change
	features []byte // idPut: its features
}

// idJournal is a tracked task's changes to its ids since the last cut, in
// blocks of a fixed size. Appending never copies what is there: a slice
// doubling as it grew copied every change again, 4-11% of a task's CPU with
// frequent checkpoints (docs/performance.md). A cut takes it
// whole.
type idJournal struct {
	blocks [][]idChange
	n      int
}

// idJournalBlock is the changes per block: 30 KB of them.
const idJournalBlock = 256

func (j *idJournal) add(c idChange) {
	last := len(j.blocks) - 1
	if last < 0 || len(j.blocks[last]) == idJournalBlock {
		j.blocks = append(j.blocks, make([]idChange, 0, idJournalBlock))
		last++
	}
	j.blocks[last] = append(j.blocks[last], c)
	j.n++
}

// all yields the changes in the order they were made.
func (j *idJournal) all() iter.Seq[*idChange] {
	return func(yield func(*idChange) bool) {
		for _, b := range j.blocks {
			for i := range b {
				if !yield(&b[i]) {
					return
				}
			}
		}
	}
}

// Cut is a checkpoint being taken: a delta holding the keys changed since
// the previous cut (or since Track), and every change to the ids since.
type Cut struct {
	head    []byte // version, kind, layout and globals, written at the cut
	ids     idJournal
	pending map[string]struct{} // keys whose record is still to encode
	next    func() (string, bool)
	stop    func()
	// The records encoded so far, in chunks that are never grown: growing
	// one buffer by doubling allocated (and faulted in) a fresh buffer of
	// megabytes on the task's goroutine, milliseconds at 1M keys.
	arena [][]byte
	recs  [][]cutRecord
	n     int // records
	err   error
}

// arenaChunk and recsChunk are the sizes of a Cut's chunks.
const (
	arenaChunk = 64 << 10
	recsChunk  = 1024
)

type cutRecord struct {
	key  string
	data []byte // in one of the arena's chunks
}

// ErrCutInProgress is returned by Cut while the previous cut's records are
// still being encoded (Step has not reported it done).
var ErrCutInProgress = errors.New("engine: a checkpoint is still being cut")

// Cut marks a checkpoint of the task as it is now, on a tracked task. It
// writes the small part of the state that is not per key at once; the
// records of the keys changed since the previous cut are encoded by Step,
// which must be called until it reports true before the task's next Cut.
// Until then every change the task makes goes to the next checkpoint.
func (t *Task) Cut() (*Cut, error) {
	if !t.track {
		return nil, errors.New("engine: Cut on a task that is not tracked")
	}
	if t.cut != nil {
		return nil, ErrCutInProgress
	}
	t.Drain(0) // the state as if every advance had fired at once
	e := codec.NewEncoder(nil)
	e.Uvarint(layoutV2)
	e.Uvarint(kindDelta)
	if err := t.encodeHead(e); err != nil {
		return nil, err
	}
	c := &Cut{head: e.Bytes(), ids: t.journal, pending: t.dirty}
	t.journal = idJournal{}
	// No size hint: a map of the last cut's size, allocated and cleared
	// here, was most of the cut's time at 1M keys; it grows with the
	// changes instead, a key at a time.
	t.dirty = make(map[string]struct{})
	t.epoch++ // every key's next change goes through touch again
	c.next, c.stop = iter.Pull(maps.Keys(c.pending))
	t.cut = c
	return c, nil
}

// Step encodes records of the cut in progress for about budget (at least
// one record), and reports whether the cut has them all; then the task may
// cut again, and Cut.Bytes may be called from any goroutine. With no cut in
// progress it reports true. A budget of 0 or less encodes every record.
func (t *Task) Step(budget time.Duration) bool {
	start := time.Now()
	// The clock is read after every record: a record takes microseconds
	// to encode, and a heavy key's can take a large part of the budget.
	return t.step(func(int) bool { return budget > 0 && time.Since(start) >= budget })
}

// step encodes records of the cut in progress until enough(n) says so after
// the nth, or none are left (then it reports true).
func (t *Task) step(enough func(n int) bool) bool {
	c := t.cut
	if c == nil {
		return true
	}
	for n := 1; ; n++ {
		key, ok := c.next()
		if !ok {
			c.stop()
			t.cut = nil
			return true
		}
		c.encode(t, key)
		delete(c.pending, key)
		if enough(n) {
			return false
		}
	}
}

// encode appends key's record, as the task holds it now.
func (c *Cut) encode(t *Task, key string) {
	if c.err != nil {
		return
	}
	var chunk []byte
	if n := len(c.arena); n > 0 {
		chunk = c.arena[n-1]
	}
	from := len(chunk)
	e := codec.NewEncoder(chunk)
	if err := t.encodeKeyRecord(e, key); err != nil {
		c.err = err
		return
	}
	b := e.Bytes()
	var data []byte
	if chunk != nil && cap(b) == cap(chunk) {
		c.arena[len(c.arena)-1] = b // it fitted
		data = b[from:len(b):len(b)]
	} else {
		// It did not fit, or there was no chunk: it starts a new one,
		// unless it is larger than a chunk.
		data = b[from:]
		if len(data) < arenaChunk {
			data = append(make([]byte, 0, arenaChunk), data...)
		}
		c.arena = append(c.arena, data)
		data = data[:len(data):len(data)]
	}
	if n := len(c.recs); n == 0 || len(c.recs[n-1]) == recsChunk {
		c.recs = append(c.recs, make([]cutRecord, 0, recsChunk))
	}
	last := &c.recs[len(c.recs)-1]
	*last = append(*last, cutRecord{key: key, data: data})
	c.n++
}

// Keys is how many key records the cut holds (once done).
func (c *Cut) Keys() int { return c.n }

// Bytes assembles the delta, once Step has reported the cut done; it may
// run on any goroutine, as the task no longer touches the cut.
func (c *Cut) Bytes() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	recs := slices.Concat(c.recs...)
	slices.SortFunc(recs, func(a, b cutRecord) int { return strings.Compare(a.key, b.key) })
	size := len(c.head) + 64*c.ids.n + 16
	for _, r := range recs {
		size += len(r.key) + len(r.data) + 8
	}
	e := codec.NewEncoder(append(make([]byte, 0, size), c.head...))
	e.Int(c.ids.n)
	var sub codec.Encoder
	for ch := range c.ids.all() {
		e.Uvarint(uint64(ch.kind))
		e.Int(ch.stream)
		switch ch.kind {
		case idPut:
			e.String(ch.id)
			sub = *codec.NewEncoder(sub.Bytes()[:0])
			encodeIDEntry(&sub, ch.entry, ch.features)
			e.ByteSlice(sub.Bytes())
		case idRemove:
			e.String(ch.id)
		}
	}
	e.Int(len(recs))
	for _, r := range recs {
		e.String(r.key)
		e.ByteSlice(r.data)
	}
	return e.Bytes(), nil
}
