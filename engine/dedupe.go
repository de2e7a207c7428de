package engine

import (
	"bytes"
	"hash/crc32"
	"hash/maphash"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/prefetch"
)

// seenIDs remembers the ids of one stream for idempotency: an event whose id
// was seen within the stream's id retention is not counted again, and a
// deciding stream re-emits the decision it stored. Entries expire in arrival
// order once their event time falls behind the watermark by the retention;
// an entry is held a little longer when an earlier arrival has a later time,
// which errs on the side of remembering.
//
// The entries live in a slice in arrival order; an open-addressing table
// (linear probing) maps each id's hash to its position there. Every event
// looks its id up and most then add it, and the table is large (ids are kept
// for an hour or more). With a Go map that was three hashes of the id per new
// event (the lookup, then a check and an insert in put) and a map the garbage
// collector scans; here it is one hash (put reuses the slot the lookup that
// missed found) and 8-byte slots without pointers (a lookup that misses the
// cache costs the same, and half the size misses less). Expiry reads the times
// from the slice, in order. The slice is cut in fixed-size chunks, so that it
// grows without copying and expiry frees it a chunk at a time.
//
// The entries hold no pointer: an entry's id, key and decision are bytes of
// its chunk's text, and the strings and slices get hands out are views of
// them. A task holds hundreds of thousands of ids; as strings and pointers
// they were an object per id for the collector to visit and 88-byte entries
// for it to scan at every cycle, as long as the ids are kept (docs/design.md
// "Memory").
type seenIDs struct {
	table  []idSlot    // len a power of two, or 0
	n      int         // ids in table
	miss   idMiss      // the last lookup that found nothing, for the put after it
	chunks []seenChunk // arrival order, seenChunkLen entries each (the last: up to)
	head   int         // index of the first entry not expired yet
	base   int         // position of chunks[0][0]
	dead   int         // entries marked dead (see seenEntry.dead)
	// shared, when the task shares an IDIndex, is its index of this
	// stream's ids: an id that expires here is released there too.
	shared *idIndexStream
	part   int32  // the task's partition, in shared
	owner  uint32 // this table, in shared
	// features holds, for the ids the decision API decided, what their
	// matched rules read (Task.Explain), as JSON, so that the API answers
	// a repeat with the same features; nil until it has any. An id's
	// features go when the id does.
	features map[string][]byte
	// journal, when the task is tracked (Track), logs the ids that expire
	// here, for the next checkpoint; stream is this table's stream.
	journal *idJournal
	stream  int
}

// idSlot is one slot of the table: 32 bits of an id's hash (never 0; 0
// marks an empty slot) and the position of its current entry (base + index
// in the chunks), modulo 2^32: the entries not expired yet span fewer.
type idSlot struct {
	h   uint32
	pos uint32
}

// index is the index in the chunks of the entry sl points to.
func (s *seenIDs) index(sl idSlot) int { return int(sl.pos - uint32(s.base)) }

// idMiss remembers where a lookup of id ended without finding it: the empty
// slot where put inserts it, while the table has not changed since.
type idMiss struct {
	id    string
	h     uint32
	slot  int
	valid bool
}

// minIDTable is the size of a table's first allocation.
const minIDTable = 64

// seenChunkLen is the number of entries of a chunk.
const seenChunkLen = 1024

// seenChunk is seenChunkLen entries in arrival order (the last chunk: up
// to), and what they keep.
type seenChunk struct {
	entries []seenEntry
	// text holds the entries' ids, keys and decisions. It is only appended
	// to: the views of it that get hands out stay as they are.
	text []byte
	// pending is nil until an entry of the chunk waits for its decision
	// (seen.pending); then one per entry.
	pending []*pendingDecision
}

// seenEntry is one id in arrival order. Its id, its key and its decision
// (when it has one) are its chunk's text from text on, back to back.
type seenEntry struct {
	time                  int64
	text                  int
	idLen, keyLen, decLen uint32
	crc                   uint32
	hasDecision           bool // its decision is not nil (perhaps empty)
	// dead marks an entry whose own time no longer says when its id
	// expires: put replaced it with a later entry of the same id (only a
	// restore can do that), or that earlier entry expired the id. Expiry
	// then consults the map, as for an id put twice.
	dead bool
	// hole marks a dead entry whose id a restore removed (idReplay.forget):
	// it no longer names an id at all, and expiry passes over it.
	hole bool
}

// seen is what is kept per id, as get returns it. decision is nil for a
// plain "allow" with nothing to report: it is re-encoded from key and time
// instead of stored.
type seen struct {
	key      string
	time     int64
	decision []byte
	pending  *pendingDecision // decide: watermark, not decided yet
	crc      uint32           // of the event's value: the decision API refuses the same id with another body
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BodyCRC is the checksum seen keeps of an event's value (CRC-32C: cheap,
// and stable across processes, so that it survives a checkpoint).
func BodyCRC(value string) uint32 {
	// Read the string's bytes in place: Checksum does not keep or modify them.
	return crc32.Checksum(unsafe.Slice(unsafe.StringData(value), len(value)), castagnoli)
}

// idSeed seeds the hashes of ids, for every table of the process and the
// IDIndex (idKeyOf): a task's lookahead computes one hash for both.
var idSeed = maphash.MakeSeed()

// get returns what is kept of id. Its key and decision are views of the
// table's text: they do not change, and stay valid after the id expires.
func (s *seenIDs) get(id string) (seen, bool) {
	slot, found := s.find(id)
	if !found {
		return seen{}, false
	}
	return s.seenAt(s.index(s.table[slot])), true
}

// replace changes what is kept of id, where it stands in arrival order, and
// returns the id as the table keeps it (see put). It reports whether the
// table holds id; when it does not, the lookup that missed is left for a put.
func (s *seenIDs) replace(id string, e seen) (string, bool) {
	slot, found := s.find(id)
	if !found {
		return "", false
	}
	i := s.index(s.table[slot])
	s.set(i, id, e)
	return s.id(i), true
}

// settle stores the decision that id's entry waited for as p, and returns
// what is kept of id now; false when id's entry no longer waits for p. One
// lookup, where a get and a replace took two.
func (s *seenIDs) settle(id string, p *pendingDecision, decision []byte) (seen, bool) {
	slot, found := s.find(id)
	if !found {
		return seen{}, false
	}
	i := s.index(s.table[slot])
	e := s.seenAt(i)
	if e.pending != p {
		return seen{}, false
	}
	e.pending, e.decision = nil, decision
	s.set(i, id, e)
	return e, true
}

// setPending marks id's entry as waiting for the decision p (a restore).
func (s *seenIDs) setPending(id string, p *pendingDecision) {
	if slot, found := s.find(id); found {
		i := s.index(s.table[slot])
		s.chunk(i).setPending(i%seenChunkLen, p)
	}
}

// hash is id's hash in the table, never 0.
func (s *seenIDs) hash(id string) uint32 {
	if h := uint32(maphash.String(idSeed, id)); h != 0 {
		return h
	}
	return 1
}

// find returns the slot of id, or the empty slot where its probe ended
// (remembered in s.miss for put), or -1 when the table is empty.
func (s *seenIDs) find(id string) (slot int, found bool) {
	if len(s.table) == 0 {
		return -1, false
	}
	h := s.hash(id)
	mask := len(s.table) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := &s.table[i]
		if sl.h == 0 {
			s.miss = idMiss{id: id, h: h, slot: i, valid: true}
			return i, false
		}
		if sl.h == h && s.id(s.index(*sl)) == id {
			return i, true
		}
	}
}

// chunk returns the chunk of the entry at index i of the chunks.
func (s *seenIDs) chunk(i int) *seenChunk { return &s.chunks[i/seenChunkLen] }

// at returns the entry at index i of the chunks.
func (s *seenIDs) at(i int) *seenEntry { return &s.chunks[i/seenChunkLen].entries[i%seenChunkLen] }

// id returns the id of the entry at index i, a view of its chunk's text.
func (s *seenIDs) id(i int) string {
	c := s.chunk(i)
	en := &c.entries[i%seenChunkLen]
	return c.str(en.text, en.idLen)
}

// seenAt returns what the entry at index i keeps.
func (s *seenIDs) seenAt(i int) seen {
	c := s.chunk(i)
	j := i % seenChunkLen
	en := &c.entries[j]
	at := en.text + int(en.idLen)
	e := seen{key: c.str(at, en.keyLen), time: en.time, crc: en.crc}
	if en.hasDecision {
		at += int(en.keyLen)
		end := at + int(en.decLen)
		e.decision = c.text[at:end:end]
	}
	if c.pending != nil {
		e.pending = c.pending[j]
	}
	return e
}

// set makes the entry at index i id's, keeping e: its bytes go at the end
// of the chunk's text (an entry set again leaves its old bytes there).
func (s *seenIDs) set(i int, id string, e seen) {
	c := s.chunk(i)
	j := i % seenChunkLen
	at := len(c.text)
	c.text = append(append(append(c.text, id...), e.key...), e.decision...)
	c.entries[j] = seenEntry{time: e.time, text: at, idLen: uint32(len(id)), keyLen: uint32(len(e.key)),
		decLen: uint32(len(e.decision)), crc: e.crc, hasDecision: e.decision != nil}
	c.setPending(j, e.pending)
}

// str returns the n bytes of the text at at, as a string that aliases them.
func (c *seenChunk) str(at int, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String(&c.text[at], n)
}

// setPending keeps p as entry j's pending decision.
func (c *seenChunk) setPending(j int, p *pendingDecision) {
	if c.pending == nil {
		if p == nil {
			return
		}
		c.pending = make([]*pendingDecision, seenChunkLen)
	}
	c.pending[j] = p
}

// clearEntry empties the entry at index i (expired, or a hole).
func (s *seenIDs) clearEntry(i int, en seenEntry) {
	c := s.chunk(i)
	c.entries[i%seenChunkLen] = en
	c.setPending(i%seenChunkLen, nil)
}

// end is the index just past the last entry.
func (s *seenIDs) end() int {
	if len(s.chunks) == 0 {
		return 0
	}
	return (len(s.chunks)-1)*seenChunkLen + len(s.chunks[len(s.chunks)-1].entries)
}

// put adds id, keeping e, and returns the id as the table keeps it: a view
// of its text, which id need not outlive.
func (s *seenIDs) put(id string, e seen) string {
	pos := s.base + s.end()
	var slot int
	if m := s.miss; m.valid && m.id == id {
		slot = m.slot // the lookup just before found id missing: its slot is still empty
		s.table[slot] = idSlot{h: m.h, pos: uint32(pos)}
		s.n++
	} else if i, found := s.find(id); found {
		s.at(s.index(s.table[i])).dead = true
		s.dead++
		s.table[i].pos = uint32(pos)
	} else {
		h := s.hash(id)
		if i < 0 {
			s.table = make([]idSlot, minIDTable)
			i = int(h) & (minIDTable - 1)
		}
		s.table[i] = idSlot{h: h, pos: uint32(pos)}
		s.n++
	}
	s.miss.valid = false
	if 4*s.n > 3*len(s.table) {
		s.grow()
	}
	if n := len(s.chunks); n == 0 || len(s.chunks[n-1].entries) == seenChunkLen {
		text := 16 * seenChunkLen
		if n > 0 {
			text = len(s.chunks[n-1].text) // ids, keys and decisions are alike from chunk to chunk
		}
		s.chunks = append(s.chunks, seenChunk{entries: make([]seenEntry, 0, seenChunkLen), text: make([]byte, 0, text)})
	}
	c := &s.chunks[len(s.chunks)-1]
	c.entries = c.entries[:len(c.entries)+1]
	i := s.end() - 1
	s.set(i, id, e)
	return s.id(i)
}

// grow doubles the table; slots keep their hashes, so ids are not hashed again.
func (s *seenIDs) grow() {
	old := s.table
	s.table = make([]idSlot, 2*len(old))
	// Write the new table before reading it. The runtime does not clear
	// memory fresh from the kernel, and a read of a page never written maps
	// the shared zero page; the write after it then faults again and flushes
	// the other cores' TLBs (an interrupt to each, very slow on a virtual
	// machine). The loop below reads each slot before it writes some: this
	// was 2.5% of a replay's CPU time.
	clear(s.table)
	mask := len(s.table) - 1
	for _, sl := range old {
		if sl.h == 0 {
			continue
		}
		i := int(sl.h) & mask
		for s.table[i].h != 0 {
			i = (i + 1) & mask
		}
		s.table[i] = sl
	}
	s.miss.valid = false
}

// remove empties a slot, moving later slots of its probe run back so that
// every id stays reachable from its home slot (deletion without tombstones).
func (s *seenIDs) remove(i int) {
	mask := len(s.table) - 1
	for j := (i + 1) & mask; s.table[j].h != 0; j = (j + 1) & mask {
		home := int(s.table[j].h) & mask
		// The slot at j can move to i unless its home lies cyclically in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = idSlot{}
	s.n--
	s.miss.valid = false
}

// expire forgets ids whose event time is before horizon.
func (s *seenIDs) expire(horizon int64) {
	end := s.end()
	if s.dead == 0 && s.head < end && s.shared == nil && s.allBefore(horizon) {
		// Everything goes (the end of a bounded input): drop the table at
		// once rather than deleting its ids one by one.
		s.reset()
		if s.journal != nil {
			s.journal.add(idChange{kind: idClear, stream: s.stream})
		}
		return
	}
	for s.head < end {
		en := s.at(s.head)
		if !en.dead && en.time >= horizon {
			// A live entry is its id's current one (see seenEntry.dead):
			// the test below, without looking the id up.
			break
		}
		id := s.id(s.head)
		if en.hole {
			// Names no id: nothing to expire.
		} else if i, found := s.find(id); found {
			// The id's current entry decides, as it would for any id put
			// twice; for a live entry it is en itself.
			cur := s.at(s.index(s.table[i]))
			if cur.time >= horizon {
				break
			}
			if s.shared != nil {
				s.shared.release(idKeyOf(id), s.owner)
			}
			if s.features != nil {
				delete(s.features, id)
			}
			if s.journal != nil {
				s.journal.add(idChange{kind: idRemove, stream: s.stream, id: id})
			}
			s.remove(i)
			if cur != en && !cur.dead {
				cur.dead = true
				s.dead++
			}
		}
		if en.dead {
			s.dead--
		}
		s.clearEntry(s.head, seenEntry{})
		s.head++
	}
	s.dropExpiredChunks()
}

// reset forgets every id at once (positions go on from where they were).
func (s *seenIDs) reset() {
	s.base += s.end()
	s.table, s.n, s.miss.valid = nil, 0, false
	s.chunks, s.head, s.dead = nil, 0, 0
	s.features = nil
}

// dropExpiredChunks drops the chunks whose entries have all expired.
func (s *seenIDs) dropExpiredChunks() {
	if n := s.head / seenChunkLen; n > 0 {
		clear(s.chunks[:n])
		s.chunks = s.chunks[n:]
		s.base += n * seenChunkLen
		s.head -= n * seenChunkLen
	}
}

// reserve sizes an empty table for n ids, as a restore knows it will hold
// about that many: it does not grow through every power of two.
func (s *seenIDs) reserve(n int) {
	if len(s.table) > 0 || n <= 0 {
		return
	}
	size := minIDTable
	for 4*n > 3*size {
		size *= 2
	}
	s.table = make([]idSlot, size)
	clear(s.table) // see grow
}

// setFeatures keeps a copy of the features of an id the decision API
// decided; id is as the table keeps it (put).
func (s *seenIDs) setFeatures(id string, features []byte) {
	if len(features) == 0 {
		return
	}
	if s.features == nil {
		s.features = make(map[string][]byte)
	}
	s.features[id] = bytes.Clone(features)
}

// allBefore reports whether every entry not expired yet has a time before
// horizon. It stops at the first that has not, which is usually the first.
func (s *seenIDs) allBefore(horizon int64) bool {
	for i, end := s.head, s.end(); i < end; i++ {
		if s.at(i).time >= horizon {
			return false
		}
	}
	return true
}

// all yields the ids not expired yet in arrival order, each with its
// current entry (what get returns): the order a snapshot lists them in.
func (s *seenIDs) all(yield func(id string, e seen) bool) {
	for i, end := s.head, s.end(); i < end; i++ {
		if s.at(i).hole {
			continue
		}
		id := s.id(i)
		if e, ok := s.get(id); ok && !yield(id, e) {
			return
		}
	}
}

func (s *seenIDs) len() int { return s.n }

// prefetchSlot starts loading the slot where a lookup of id begins (and
// its slot in the IDIndex).
func (s *seenIDs) prefetchSlot(id string) {
	a := maphash.String(idSeed, id) // s.hash and idKeyOf, but once
	if s.shared != nil {
		s.shared.prefetch(max(a, 1))
	}
	if len(s.table) == 0 {
		return
	}
	h := uint32(a)
	if h == 0 {
		h = 1
	}
	prefetch.Line(unsafe.Pointer(&s.table[int(h)&(len(s.table)-1)]))
}

// idReplay plays a chain's changes to a stream's ids (the deltas' journals,
// in chain order) on the table restored from the chain's base, to the state
// a restore of the merged lists (applyIDChanges) gives: a put of an id the
// table holds changes its entry in place, where it stands in arrival order;
// any other put comes last; a removed id leaves a hole where its entry
// stood. Restoring this way builds no merged list of the hundreds of
// thousands of ids a task holds.
type idReplay struct {
	s *seenIDs
	// dead lists, by id, the positions (seenIDs.base + index) of the dead
	// entries the base's restore left, which a merge drops with their id
	// (rare: an id listed twice); nil when it left none.
	dead map[string][]int
}

func newIDReplay(s *seenIDs) *idReplay {
	r := &idReplay{s: s}
	if s.dead > 0 {
		r.dead = make(map[string][]int)
		for j, end := s.head, s.end(); j < end; j++ {
			if s.at(j).dead {
				id := s.id(j)
				r.dead[id] = append(r.dead[id], s.base+j)
			}
		}
	}
	return r
}

func (r *idReplay) put(id string, e seen, features []byte) {
	s := r.s
	kept, ok := s.replace(id, e)
	if !ok {
		kept = s.put(id, e) // the lookup that missed left its slot for put
	}
	if len(features) > 0 {
		s.setFeatures(kept, features)
	} else if s.features != nil {
		delete(s.features, kept)
	}
}

func (r *idReplay) forget(id string) {
	s := r.s
	i, found := s.find(id)
	if !found {
		return
	}
	s.hole(s.index(s.table[i]))
	s.remove(i)
	if s.features != nil {
		delete(s.features, id)
	}
	for _, pos := range r.dead[id] {
		if j := pos - s.base; j >= s.head {
			s.hole(j)
		}
	}
	delete(r.dead, id)
}

func (r *idReplay) clear() {
	r.s.reset()
	r.dead = nil
}

// done drops the holes at the head of the table: ids expire in arrival
// order, so most of those a chain removed were there.
func (r *idReplay) done() {
	s := r.s
	for end := s.end(); s.head < end && s.at(s.head).hole; s.head++ {
		s.clearEntry(s.head, seenEntry{})
		s.dead--
	}
	s.dropExpiredChunks()
}

// hole turns the entry at index i into a hole (seenEntry.hole).
func (s *seenIDs) hole(i int) {
	if !s.at(i).dead {
		s.dead++
	}
	s.clearEntry(i, seenEntry{dead: true, hole: true})
}
