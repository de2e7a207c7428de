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
type seenIDs struct {
	byID  map[string]seen
	order []string // ids in arrival order; head is the next to expire
	head  int
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

func newSeenIDs() *seenIDs { return &seenIDs{byID: make(map[string]seen)} }

func (s *seenIDs) get(id string) (seen, bool) {
	e, ok := s.byID[id]
	return e, ok
}

func (s *seenIDs) put(id string, e seen) {
	s.byID[id] = e
	s.order = append(s.order, id)
}

// expire forgets ids whose event time is before horizon.
func (s *seenIDs) expire(horizon int64) {
	for s.head < len(s.order) {
		id := s.order[s.head]
		if e, ok := s.byID[id]; ok && e.time >= horizon {
			break
		}
		delete(s.byID, id)
		s.order[s.head] = ""
		s.head++
	}
	if s.head > 1024 && s.head > len(s.order)/2 {
		s.order = append([]string(nil), s.order[s.head:]...)
		s.head = 0
	}
}

func (s *seenIDs) len() int { return len(s.byID) }
