package engine

import (
	"hash/crc32"
	"unsafe"
)

// seenIDs remembers the ids of one stream for idempotency: an event whose id
// was seen within the stream's id retention is not counted again, and a
// deciding stream re-emits the decision it stored. Entries expire in arrival
// order once their event time falls behind the watermark by the retention;
// an entry is held a little longer when an earlier arrival has a later time,
// which errs on the side of remembering.
//
// The entries live in a slice in arrival order and the map holds only each
// id's position in it. Every event looks the map up and most add to it, and
// the map is large (ids are kept for an hour or more), so its slots are kept
// small: a 24-byte slot instead of one with the whole entry makes the lookups
// touch less memory and the rehashes as the map grows move less of it.
// Expiry reads the times from the slice, in order, without hashing. The
// slice is cut in fixed-size chunks, so that it grows without copying and
// expiry frees it a chunk at a time.
type seenIDs struct {
	byID   map[string]int // id -> its position: base + its index in the chunks
	chunks [][]seenEntry  // arrival order, seenChunk entries each (the last: up to)
	head   int            // index of the first entry not expired yet
	base   int            // position of chunks[0][0]
	dead   int            // entries marked dead (see seenEntry.dead)
}

// seenChunk is the number of entries of a chunk.
const seenChunk = 1024

// seenEntry is one id in arrival order.
type seenEntry struct {
	id string
	seen
	// dead marks an entry whose own time no longer says when its id
	// expires: put replaced it with a later entry of the same id (only a
	// restore can do that), or that earlier entry expired the id. Expiry
	// then consults the map, as for an id put twice.
	dead bool
}

// seen is what is kept per id. decision is nil for a plain "allow" with
// nothing to report: it is re-encoded from key and time instead of stored.
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

func newSeenIDs() *seenIDs { return &seenIDs{byID: make(map[string]int)} }

func (s *seenIDs) get(id string) (seen, bool) {
	if e := s.ref(id); e != nil {
		return *e, true
	}
	return seen{}, false
}

// ref returns the entry of id to update in place, or nil. The pointer is
// valid until the next put or expire.
func (s *seenIDs) ref(id string) *seen {
	i, ok := s.byID[id]
	if !ok {
		return nil
	}
	return &s.at(i - s.base).seen
}

// at returns the entry at index i of the chunks.
func (s *seenIDs) at(i int) *seenEntry { return &s.chunks[i/seenChunk][i%seenChunk] }

// end is the index just past the last entry.
func (s *seenIDs) end() int {
	if len(s.chunks) == 0 {
		return 0
	}
	return (len(s.chunks)-1)*seenChunk + len(s.chunks[len(s.chunks)-1])
}

func (s *seenIDs) put(id string, e seen) {
	if i, ok := s.byID[id]; ok {
		s.at(i - s.base).dead = true
		s.dead++
	}
	if n := len(s.chunks); n == 0 || len(s.chunks[n-1]) == seenChunk {
		s.chunks = append(s.chunks, make([]seenEntry, 0, seenChunk))
	}
	last := &s.chunks[len(s.chunks)-1]
	s.byID[id] = s.base + s.end()
	*last = append(*last, seenEntry{id: id, seen: e})
}

// expire forgets ids whose event time is before horizon.
func (s *seenIDs) expire(horizon int64) {
	end := s.end()
	if s.dead == 0 && s.head < end && s.allBefore(horizon) {
		// Everything goes (the end of a bounded input): drop the map at once
		// rather than deleting its ids one by one.
		s.byID = make(map[string]int)
		s.base += end
		s.chunks, s.head = nil, 0
		return
	}
	for s.head < end {
		en := s.at(s.head)
		if !en.dead {
			if en.time >= horizon {
				break
			}
			delete(s.byID, en.id)
		} else if i, ok := s.byID[en.id]; ok {
			// The id's current entry decides, as it would for any id put twice.
			cur := s.at(i - s.base)
			if cur.time >= horizon {
				break
			}
			delete(s.byID, en.id)
			if !cur.dead {
				cur.dead = true
				s.dead++
			}
		}
		if en.dead {
			s.dead--
		}
		*en = seenEntry{}
		s.head++
	}
	if n := s.head / seenChunk; n > 0 {
		// Drop the chunks that have expired entirely.
		clear(s.chunks[:n])
		s.chunks = s.chunks[n:]
		s.base += n * seenChunk
		s.head -= n * seenChunk
	}
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
		id := s.at(i).id
		if e, ok := s.get(id); ok && !yield(id, e) {
			return
		}
	}
}

func (s *seenIDs) len() int { return len(s.byID) }
