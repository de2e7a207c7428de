package engine

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/prefetch"
	"github.com/vigil-cep/vigil/service"
)

// An id (a stream's transaction id) keys its decision (docs/design.md
// "Idempotency"): the same id with another key is not the same transaction
// sent again but another one, and deciding it too would write a second,
// different verdict under the same record key of the decisions topic. Such an
// event is refused: it goes to the DLQ with an IDConflictError as its reason
// (the decision API answers 409). How far that reaches:
//
//   - within a task (partition p of every input), always, for as long as its
//     idempotency table remembers the id (the stream's id retention): an id
//     seen with another key is refused;
//   - across the tasks of one service instance, which share an IDIndex: an
//     id that another task holds is refused, whatever its key (the same key
//     on another partition means a producer that places keys unlike the
//     others; that task's decision is not this one's to repeat);
//   - not across the instances of a group: a conflicting id whose keys fall
//     in partitions that two instances own is decided by each. Catching that
//     would take routing every id to one owner (a topic keyed by id) on the
//     path of every event;
//   - in replay, within a partition only: an id that two keys send on two
//     partitions is decided by each, as across instances. Replay runs a task
//     per partition, in parallel; checking across them in input order (for
//     outputs that are the same bytes every run) cost about 6% of replay's
//     throughput, on the one goroutine that dispatches every record, whose
//     cache the ids' text has left (measured, and not kept).

// IDConflictError is why an event was refused: its id is held, within its
// retention, by another key of the same task, or by another task.
type IDConflictError struct {
	ID        string
	Key       string // the refused event's key
	HeldBy    string // the key the task saw the id with; "" when another task holds it
	Partition int32  // the partition of the task that holds it, when HeldBy is ""
}

// Is makes errors.Is(err, service.ErrIDConflict) hold.
func (e *IDConflictError) Is(target error) bool { return target == service.ErrIDConflict }

func (e *IDConflictError) Error() string {
	if e.HeldBy != "" {
		return fmt.Sprintf("id %q was already seen with another key within its retention (key %q, this event's key %q): refused, not decided again",
			e.ID, e.HeldBy, e.Key)
	}
	return fmt.Sprintf("id %q was already seen on partition %d within its retention: refused, not decided again", e.ID, e.Partition)
}

// IDIndex is the index of the ids that the tasks of a process remember (their
// idempotency tables), each with the partition of the task that holds it, so
// that a task refuses an id another task holds (see IDConflictError). Give
// every task of the process the same index (SharedIDs). It is safe for
// concurrent use.
//
// An entry lives as long as the table that holds it: a task adds an id when
// it accepts its event and removes it when the id expires from its table (the
// stream's id retention behind the task's watermark); a task that restores a
// snapshot adds what it holds, taking over the entries its partition's
// previous task held (a ruleset switch), and Close removes what is left. So
// the index is bounded as the tables are.
//
// It is built for the path of every event: per stream, shards with a lock
// each, chosen by the id's hash; in each, an open-addressing table of 24-byte
// slots without pointers (nothing for the collector to scan, nothing
// allocated per id) that holds the id's 96-bit hash rather than the id (two
// ids live at once would have to share all 96 bits for one to be refused
// wrongly); and a task loads an id's slot a few records ahead of it
// (Task.Process looks ahead), as it does its own table's.
type IDIndex struct {
	mu      sync.Mutex
	streams map[string]*idIndexStream
	tokens  atomic.Uint32 // names the tables that hold ids (seenIDs.owner)
}

// NewIDIndex returns an empty index.
func NewIDIndex() *IDIndex { return &IDIndex{streams: make(map[string]*idIndexStream)} }

// stream returns the index of the ids of the stream named name.
func (x *IDIndex) stream(name string) *idIndexStream {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.streams[name]
	if s == nil {
		s = new(idIndexStream)
		x.streams[name] = s
	}
	return s
}

// Len returns how many ids the index holds.
func (x *IDIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, s := range x.streams {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			n += sh.n
			sh.mu.Unlock()
		}
	}
	return n
}

// idShardBits is log2 of the shards of a stream's index: enough that tasks
// on different cores seldom wait for each other.
const idShardBits = 6

// idIndexStream is the index of one stream's ids.
type idIndexStream struct {
	shards [1 << idShardBits]idShard
}

type idShard struct {
	mu sync.Mutex
	// slots is written under mu; it is read without mu only to prefetch
	// (a stale table is a wasted hint, not an error).
	slots atomic.Pointer[[]idxSlot]
	n     int
	_     [40]byte // a cache line each: the locks of two shards do not share one
}

// idxSlot is one id: a 96-bit hash (a, never 0 for a slot in use, and b),
// the partition of the task that holds it, and the table that does.
type idxSlot struct {
	a     uint64
	b     uint32
	owner uint32
	part  int32
}

// idKey is an id's hash in an IDIndex.
type idKey struct {
	a uint64
	b uint32
}

var idSeed2 = maphash.MakeSeed()

// idKeyOf hashes id for an IDIndex: a with the seed of the tasks' tables
// (idSeed), b with another.
func idKeyOf(id string) idKey {
	a := maphash.String(idSeed, id)
	if a == 0 {
		a = 1
	}
	return idKey{a, uint32(maphash.String(idSeed2, id))}
}

func (s *idIndexStream) shard(k idKey) *idShard { return &s.shards[k.a>>(64-idShardBits)] }

// find returns k's slot in slots, or the empty slot where its probe ended.
func findIdx(slots []idxSlot, k idKey) (int, bool) {
	mask := len(slots) - 1
	for i := int(k.a) & mask; ; i = (i + 1) & mask {
		sl := &slots[i]
		if sl.a == k.a && sl.b == k.b {
			return i, true
		}
		if sl.a == 0 {
			return i, false
		}
	}
}

// claim adds k, held by owner for partition part, unless another partition
// holds it: then it returns that partition and false. An entry of the same
// partition passes to owner (a task that took over the partition's state).
func (s *idIndexStream) claim(k idKey, part int32, owner uint32) (int32, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.slots.Load()
	if p == nil {
		t := make([]idxSlot, minIDTable)
		p = &t
		sh.slots.Store(p)
	}
	slots := *p
	i, found := findIdx(slots, k)
	if found {
		if slots[i].part != part {
			return slots[i].part, false
		}
		slots[i].owner = owner
		return part, true
	}
	slots[i] = idxSlot{a: k.a, b: k.b, owner: owner, part: part}
	if sh.n++; 2*sh.n > len(slots) {
		bigger := make([]idxSlot, 2*len(slots))
		clear(bigger) // written before it is read: see seenIDs.grow
		mask := len(bigger) - 1
		for _, sl := range slots {
			if sl.a == 0 {
				continue
			}
			j := int(sl.a) & mask
			for bigger[j].a != 0 {
				j = (j + 1) & mask
			}
			bigger[j] = sl
		}
		sh.slots.Store(&bigger)
	}
	return part, true
}

// holder returns the partition that holds k, if any.
func (s *idIndexStream) holder(k idKey) (int32, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.slots.Load()
	if p == nil {
		return 0, false
	}
	i, found := findIdx(*p, k)
	return (*p)[i].part, found
}

// release removes k if owner holds it.
func (s *idIndexStream) release(k idKey, owner uint32) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.slots.Load()
	if p == nil {
		return
	}
	slots := *p
	i, found := findIdx(slots, k)
	if !found || slots[i].owner != owner {
		return
	}
	// Deletion by backward shift, as seenIDs.remove.
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j].a != 0; j = (j + 1) & mask {
		home := int(slots[j].a) & mask
		if (j-home)&mask >= (j-i)&mask {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = idxSlot{}
	sh.n--
}

// prefetch starts loading the slot where a lookup of an id whose key has a
// as its first half begins.
func (s *idIndexStream) prefetch(a uint64) {
	if p := s.shards[a>>(64-idShardBits)].slots.Load(); p != nil {
		prefetch.Line(unsafe.Pointer(&(*p)[int(a)&(len(*p)-1)]))
	}
}

// SharedIDs makes the task register the ids it remembers in x, as partition
// part, and refuse those that x says another partition holds (see
// IDIndex). Call Close when the task is dropped.
func SharedIDs(x *IDIndex, part int32) Option {
	return optionFunc(func(t *Task) { t.ids, t.part = x, part })
}

// shareIDs connects the task's id tables to its IDIndex.
func (t *Task) shareIDs() {
	if t.ids == nil {
		return
	}
	for i, s := range t.seen {
		if s != nil {
			s.shared, s.part, s.owner = t.ids.stream(t.rs.Streams[i].Name), t.part, t.ids.tokens.Add(1)
		}
	}
}

// claimRestored registers in the IDIndex the ids a restored snapshot holds.
// One that another partition holds already (two instances decided it before
// this one took the partition over) stays that partition's: each table keeps
// its decision, and releases only its own entry.
func (t *Task) claimRestored() {
	for _, s := range t.seen {
		if s == nil || s.shared == nil {
			continue
		}
		for id := range s.all {
			s.shared.claim(idKeyOf(id), s.part, s.owner)
		}
	}
}

// Close releases the ids the task holds in its IDIndex (SharedIDs), for a
// task that is being dropped: its partition was revoked, or a task of the
// next ruleset version took its state over (and with it the entries of the
// streams it still has). It does nothing without an index. The task must not
// be used after. A cut in progress is abandoned.
func (t *Task) Close() {
	if c := t.cut; c != nil {
		c.stop()
		t.cut = nil
	}
	for _, s := range t.seen {
		if s != nil && s.shared != nil {
			for id := range s.all {
				s.shared.release(idKeyOf(id), s.owner)
			}
		}
	}
}

// idConflict reports, as an IDConflictError, whether an event of stream
// streamIdx with this id and key would be refused, without processing it:
// Decide answers service.ErrIDConflict for it rather than writing it to the
// DLQ. (A conflict that arises between this call and processing is still
// refused there.)
func (t *Task) idConflict(streamIdx int, id, key string) error {
	s := t.seen[streamIdx]
	if s == nil {
		return nil
	}
	if e, ok := s.get(id); ok {
		if e.key != key {
			return &IDConflictError{ID: id, Key: key, HeldBy: e.key}
		}
		return nil
	}
	if s.shared != nil {
		if part, ok := s.shared.holder(idKeyOf(id)); ok && part != s.part {
			return &IDConflictError{ID: id, Key: key, Partition: part}
		}
	}
	return nil
}
