package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vigil-cep/vigil/internal/codec"
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
				if e, ok := s.get(id); ok {
					e.crc++
					s.replace(id, e)
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

// TestIDReplay: a chain's id changes played on the table restored from its
// base (idReplay, what RestoreChain does) give the table a restore of the
// merged lists (applyIDChanges, what MergeSnapshots writes) gives: the same
// ids, entries and features in the same order, and the same ids expiring at
// every horizon after. Random bases list some ids twice (as a snapshot does
// after a restore put one twice); the changes put ids the base holds and
// others, remove ids, put removed ones again, and now and then clear.
func TestIDReplay(t *testing.T) {
	entry := func(r *rand.Rand, id string, time int64) []byte {
		var e codec.Encoder
		var features []byte
		if r.IntN(4) == 0 {
			features = []byte(fmt.Sprint(`{"f":`, r.IntN(9), `}`))
		}
		encodeIDEntry(&e, seen{key: "k" + id, time: time, crc: uint32(r.IntN(1000))}, features)
		return e.Bytes()
	}
	restore := func(t *testing.T, s *seenIDs, items []idItem) {
		for _, it := range items {
			id, en, features, err := decodeIDEntry(it.id, it.entry)
			if err != nil {
				t.Fatal(err)
			}
			s.setFeatures(s.put(id, en), features)
		}
	}
	held := func(s *seenIDs) []string {
		var out []string
		for id, e := range s.all {
			out = append(out, fmt.Sprint(id, e, string(s.features[id])))
		}
		return append(out, fmt.Sprint(s.len(), " ids, ", len(s.features), " features"))
	}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 3))
		pool := 10 + r.IntN(200)
		id := func() string { return fmt.Sprint("id", r.IntN(pool)) }
		var base []idItem
		for i := range r.IntN(300) {
			base = append(base, idItem{[]byte(id()), entry(r, "", int64(i+r.IntN(20)))})
		}
		var changes []idChangeView
		for i := range r.IntN(300) {
			switch op := r.IntN(100); {
			case op < 60:
				x := id()
				changes = append(changes, idChangeView{kind: idPut, id: []byte(x), entry: entry(r, x, int64(300+i+r.IntN(20)))})
			case op < 98:
				changes = append(changes, idChangeView{kind: idRemove, id: []byte(id())})
			default:
				changes = append(changes, idChangeView{kind: idClear})
			}
		}

		merged := new(seenIDs)
		if ids := applyIDChanges([][]idItem{base}, changes); len(ids) > 0 {
			restore(t, merged, ids[0])
		}
		played := new(seenIDs)
		restore(t, played, base)
		rp := newIDReplay(played)
		for _, ch := range changes {
			switch ch.kind {
			case idPut:
				id, en, features, err := decodeIDEntry(ch.id, ch.entry)
				if err != nil {
					t.Fatal(err)
				}
				rp.put(id, en, features)
			case idRemove:
				rp.forget(string(ch.id))
			case idClear:
				rp.clear()
			}
		}
		rp.done()

		for horizon := int64(-1); horizon < 700; horizon += 1 + int64(r.IntN(40)) {
			merged.expire(horizon)
			played.expire(horizon)
			if got, want := held(played), held(merged); !slices.Equal(got, want) {
				t.Fatalf("seed %d, horizon %d: the replayed table holds\n%q\nthe merged one\n%q", seed, horizon, got, want)
			}
		}
	}
}
