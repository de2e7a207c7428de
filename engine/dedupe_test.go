package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refSeenIDs is the plain map-and-order store seenIDs replaced: the
// reference its behaviour is checked against.
type refSeenIDs struct {
	byID  map[string]seen
	order []string
	head  int
}

func (s *refSeenIDs) put(id string, e seen) {
	s.byID[id] = e
	s.order = append(s.order, id)
}

func (s *refSeenIDs) expire(horizon int64) {
	for s.head < len(s.order) {
		id := s.order[s.head]
		if e, ok := s.byID[id]; ok && e.time >= horizon {
			break
		}
		delete(s.byID, id)
		s.head++
	}
}

// TestSeenIDsModel runs random puts (ids repeated too, as only a restore
// does), updates and expiries on seenIDs and on the reference, and compares
// what they hold, in the order a snapshot lists it; half the seeds run across
// the wrap of the table's 32-bit positions.
func TestSeenIDsModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		s, ref := new(seenIDs), &refSeenIDs{byID: map[string]seen{}}
		if seed%2 == 1 {
			// Positions are kept modulo 2^32 in the table: start near the
			// wrap, as a task that has seen four billion ids would be.
			s.base = 1<<32 - 5000
		}
		horizon := int64(0)
		for step := range 20_000 {
			switch op := r.IntN(100); {
			case op < 70:
				id := fmt.Sprint("id", r.IntN(3000))
				if _, ok := s.get(id); ok && r.IntN(10) != 0 {
					continue // as the task: an id seen is not put again, but for a restore
				}
				e := seen{key: id, time: horizon + int64(r.IntN(100)) - 20, crc: uint32(step)}
				s.put(id, e)
				ref.put(id, e)
			case op < 80:
				id := fmt.Sprint("id", r.IntN(3000))
				if e := s.ref(id); e != nil {
					e.crc++
					re := ref.byID[id]
					re.crc++
					ref.byID[id] = re
				}
			case op < 99:
				horizon += int64(r.IntN(10))
				s.expire(horizon)
				ref.expire(horizon)
			default:
				s.expire(1 << 62)
				ref.expire(1 << 62)
			}
			if s.len() != len(ref.byID) {
				t.Fatalf("seed %d step %d: %d ids, want %d", seed, step, s.len(), len(ref.byID))
			}
			if step%500 == 0 || step == 19_999 {
				var got, want []string
				for id, e := range s.all {
					got = append(got, fmt.Sprint(id, e))
				}
				for _, id := range ref.order[ref.head:] {
					if e, ok := ref.byID[id]; ok {
						want = append(want, fmt.Sprint(id, e))
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: holds\n%v\nwant\n%v", seed, step, got, want)
				}
			}
		}
	}
}
