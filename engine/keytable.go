package engine

import (
	"hash/maphash"
	"iter"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/prefetch"
)

// keyTable holds a task's key states by key. It is an open-addressing table
// of (hash, state) slots rather than a Go map so that a lookup can be taken
// in steps, each started ahead of the record that needs it (see lookahead):
// with 100k keys most lookups miss every cache, and a Go map's lookup is one
// chain of dependent misses (its control word, its key, its value) that
// nothing else overlaps.
//
// Linear probing, with deletion by backward shift: no tombstones, so a
// table that loses and gains keys for days probes as a fresh one does.
type keyTable struct {
	slots []keySlot // len a power of two, or 0
	n     int       // keys in slots
}

// keySlot is one slot: empty when ks is nil.
type keySlot struct {
	h  uint64 // hash of ks.key
	ks *keyState
}

// minKeyTable is the size of a table's first allocation.
const minKeyTable = 64

// keySeed seeds the hashes of keys, for every task of the process: the
// decode stage hashes a record's key (Record.keyHash) while its text is in
// its cache, ahead of the task.
var keySeed = maphash.MakeSeed()

// keyHash is key's hash in a keyTable.
func keyHash(key string) uint64 { return maphash.String(keySeed, key) }

// get returns the state of key, whose hash is h, or nil.
func (kt *keyTable) get(key string, h uint64) *keyState {
	if len(kt.slots) == 0 {
		return nil
	}
	mask := len(kt.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := &kt.slots[i]
		if sl.ks == nil {
			return nil
		}
		if sl.h == h && sl.ks.key == key {
			return sl.ks
		}
	}
}

// guess returns the first state whose key hashes to h, or nil, without
// comparing keys (which would read the key): the likely state of a key,
// for prefetching only.
func (kt *keyTable) guess(h uint64) *keyState {
	if len(kt.slots) == 0 {
		return nil
	}
	mask := len(kt.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := &kt.slots[i]
		if sl.ks == nil || sl.h == h {
			return sl.ks
		}
	}
}

// prefetchSlot starts loading the slot where a lookup of h begins.
func (kt *keyTable) prefetchSlot(h uint64) {
	if len(kt.slots) > 0 {
		prefetch.Line(unsafe.Pointer(&kt.slots[int(h)&(len(kt.slots)-1)]))
	}
}

// insert adds ks, whose key (hash h) is not in the table.
func (kt *keyTable) insert(ks *keyState, h uint64) {
	if (kt.n+1)*4 > len(kt.slots)*3 { // at most three quarters full
		kt.grow()
	}
	kt.place(keySlot{h: h, ks: ks})
	kt.n++
}

// place puts sl in the first empty slot of its probe.
func (kt *keyTable) place(sl keySlot) {
	mask := len(kt.slots) - 1
	i := int(sl.h) & mask
	for kt.slots[i].ks != nil {
		i = (i + 1) & mask
	}
	kt.slots[i] = sl
}

func (kt *keyTable) grow() { kt.resize(max(minKeyTable, 2*len(kt.slots))) }

// resize moves the keys to a table of size slots.
func (kt *keyTable) resize(size int) {
	old := kt.slots
	kt.slots = make([]keySlot, size)
	for _, sl := range old {
		if sl.ks != nil {
			kt.place(sl)
		}
	}
}

// slotsFor is the size of a table for n keys, at least min: a power of two
// at most three quarters full.
func slotsFor(n, min int) int {
	size := max(minKeyTable, min)
	for n*4 > size*3 {
		size *= 2
	}
	return size
}

// delete removes ks, if it is in the table. The slots after it in its run
// move back where their probes still find them.
func (kt *keyTable) delete(ks *keyState) {
	if len(kt.slots) == 0 {
		return
	}
	mask := len(kt.slots) - 1
	i := int(keyHash(ks.key)) & mask
	for kt.slots[i].ks != ks {
		if kt.slots[i].ks == nil {
			return // not in the table
		}
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		sl := kt.slots[j]
		if sl.ks == nil {
			break
		}
		// sl may move to the hole at i unless its probe starts after i
		// (cyclically, in (i, j]): a lookup of it would not pass i then.
		if home := int(sl.h) & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		kt.slots[i] = sl
		i = j
	}
	kt.slots[i] = keySlot{}
	kt.n--
}

// reserve makes room for n keys in all, so that a table filled with a
// known number of keys (a restore) does not grow and rehash on the way.
func (kt *keyTable) reserve(n int) {
	if size := slotsFor(n, len(kt.slots)); size != len(kt.slots) {
		kt.resize(size)
	}
}

// shrink reallocates the table to fit its keys once they fill less than
// an eighth of it: a table never gives memory back on its own, and most of
// a large task's keys may leave it at once (Cool).
func (kt *keyTable) shrink() {
	if len(kt.slots) > minKeyTable && kt.n*8 < len(kt.slots) {
		kt.resize(slotsFor(kt.n, 0))
	}
}

// len is the number of keys.
func (kt *keyTable) len() int { return kt.n }

// all yields every key's state, in no particular order.
func (kt *keyTable) all() iter.Seq[*keyState] {
	return func(yield func(*keyState) bool) {
		for _, sl := range kt.slots {
			if sl.ks != nil && !yield(sl.ks) {
				return
			}
		}
	}
}
