package window

import (
	"hash/maphash"
	"iter"
	"slices"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/prefetch"
)

// keyIndex finds the state of a key by its key: a table of (hash, position)
// slots that holds no pointer, and the states in a slice in the order they
// were added, rather than a Go map.
//
// Why not a map: each of its entries holds two pointers, the key's string
// and the state, which the collector follows for every key at every cycle,
// although the engine reaches every state through a Key anyway. The table
// here has none (the collector does not scan it) and the slice one per key:
// a full collection of the engine's state costs about a sixth less CPU
// (docs/design.md "Memory").
//
// The table probes linearly and deletes by backward shift, so that it has
// no tombstones. A removed state leaves a hole in the slice, which the next
// state added takes (free): no removal renumbers the states. Renumbering
// them reads every state, a cache miss each, and at a million keys held a
// task for tens of milliseconds in the one removal that paid for it, in
// series as an hour's end dropped its windows (docs/performance.md). Only
// a shrink renumbers, when few keys are left (see shrink), and an index that
// empties starts over at once.
type keyIndex struct {
	states []*keyState // by position; nil where removed
	free   []int32     // the positions where states is nil, taken before it grows
	slots  []keySlot   // len a power of two, or 0
	n      int         // states held
}

// keySlot is one slot of the table: empty when pos is 0.
type keySlot struct {
	h   uint64 // the key's hash
	pos int32  // the state's position in states, plus one
}

// minKeySlots is the size of the table's first allocation.
const minKeySlots = 64

// keySeed seeds the hashes of every operator's keys.
var keySeed = maphash.MakeSeed()

func keyHash(key string) uint64 { return maphash.String(keySeed, key) }

// len returns the number of keys held.
func (x *keyIndex) len() int { return x.n }

// get returns the state of key, or nil.
func (x *keyIndex) get(key string) *keyState {
	if x.n == 0 {
		return nil
	}
	h := keyHash(key)
	mask := len(x.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := x.slots[i]
		if sl.pos == 0 {
			return nil
		}
		if sl.h == h {
			if ks := x.states[sl.pos-1]; ks.key == key {
				return ks
			}
		}
	}
}

// prefetch starts loading the slot where a lookup of key begins.
func (x *keyIndex) prefetch(key string) {
	if len(x.slots) > 0 {
		prefetch.Line(unsafe.Pointer(&x.slots[int(keyHash(key))&(len(x.slots)-1)]))
	}
}

// add adds ks, whose key the index does not hold.
func (x *keyIndex) add(ks *keyState) {
	if (x.n+1)*4 > len(x.slots)*3 { // at most three quarters full
		x.resize(max(minKeySlots, 2*len(x.slots)))
	}
	if k := len(x.free); k > 0 {
		ks.pos = x.free[k-1]
		x.free = x.free[:k-1]
		x.states[ks.pos] = ks
	} else {
		ks.pos = int32(len(x.states))
		x.states = append(x.states, ks)
	}
	x.place(keySlot{h: keyHash(ks.key), pos: ks.pos + 1})
	x.n++
}

// reserve makes room for n keys in all, so that an index filled with a
// known number of keys (a restore) does not grow on the way.
func (x *keyIndex) reserve(n int) {
	if size := slotsFor(n); size > len(x.slots) {
		x.resize(size)
	}
	x.states = slices.Grow(x.states, max(0, n-x.n-len(x.free))) // new keys fill the holes, then go at the end
}

// slotsFor is the size of a table that holds n keys at most three quarters
// full.
func slotsFor(n int) int {
	size := minKeySlots
	for n*4 > size*3 {
		size *= 2
	}
	return size
}

// place puts sl in the first empty slot of its probe.
func (x *keyIndex) place(sl keySlot) {
	mask := len(x.slots) - 1
	i := int(sl.h) & mask
	for x.slots[i].pos != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = sl
}

// resize rebuilds the table with size slots.
func (x *keyIndex) resize(size int) {
	old := x.slots
	x.slots = make([]keySlot, size)
	for _, sl := range old {
		if sl.pos != 0 {
			x.place(sl)
		}
	}
}

// remove removes ks, which the index holds. The slots after its slot in its
// run move back where their probes still find them.
func (x *keyIndex) remove(ks *keyState) {
	mask := len(x.slots) - 1
	i := int(keyHash(ks.key)) & mask
	for x.slots[i].pos != ks.pos+1 {
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		sl := x.slots[j]
		if sl.pos == 0 {
			break
		}
		// sl may move to the hole at i unless its probe starts after i
		// (cyclically, in (i, j]): a lookup of it would not pass i then.
		if home := int(sl.h) & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		x.slots[i] = sl
		i = j
	}
	x.slots[i] = keySlot{}
	x.states[ks.pos] = nil
	x.n--
	if x.n == 0 {
		// Every position is a hole (nil): start over, keeping the room.
		x.states, x.free = x.states[:0], x.free[:0]
		return
	}
	x.free = append(x.free, ks.pos)
}

// shrink gives back the memory of a table sized for many more keys than are
// held (Operator.shrink). It reads no state: a slot carries its key's hash
// and position. The states themselves are renumbered, closing the holes,
// only once they are a sixteenth of the positions: renumbering reads every
// state held, a cache miss each, which at a quarter of a million keys held
// a task for 30 ms.
func (x *keyIndex) shrink() {
	var states []*keyState // renumbered, or nil: the positions stay
	if len(x.states) >= 16*x.n {
		states = make([]*keyState, 0, x.n)
		for _, ks := range x.states {
			if ks != nil {
				ks.pos = int32(len(states))
				states = append(states, ks)
			}
		}
	}
	old := x.slots
	x.slots = make([]keySlot, slotsFor(x.n))
	for _, sl := range old {
		if sl.pos == 0 {
			continue
		}
		if states != nil {
			sl.pos = x.states[sl.pos-1].pos + 1 // its state's new position
		}
		x.place(sl)
	}
	if states != nil {
		x.states, x.free = states, nil
	}
}

// all yields every state, in no particular order.
func (x *keyIndex) all() iter.Seq[*keyState] {
	return func(yield func(*keyState) bool) {
		for _, ks := range x.states {
			if ks != nil && !yield(ks) {
				return
			}
		}
	}
}
