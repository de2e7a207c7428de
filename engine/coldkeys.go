package engine

import (
	"slices"

	"github.com/vigil-cep/vigil/stream"
)

// coldKeys holds frozen keys' records: a table of (hash, entry) slots and
// the entries, neither with a pointer, and the bytes in chunks that are
// only appended to (a removed entry's bytes stay until a compaction copies
// the live ones into new chunks), so that a view of a record stays valid
// for as long as it is held.
type coldKeys struct {
	slots   []coldSlot  // len a power of two, or 0
	ents    []coldEntry // dense: a removal moves the last entry into the hole
	chunks  [][]byte
	live    int     // bytes of the entries held
	garbage int     // bytes of removed entries, still in chunks
	wakes   []int32 // entries whose wake is not MaxTime, a min-heap by wake
}

// coldSlot is one slot of the table: empty when e is 0.
type coldSlot struct {
	h uint64 // the key's hash (keyHash)
	e int32  // the entry's index, plus one
}

// coldEntry is one frozen key: its key and record are back to back in
// chunks[chunk][off:].
type coldEntry struct {
	h    uint64
	wake int64 // the watermark before which the key must thaw
	// eager is the wake of its patterns and joins: a task firing in slices
	// lets a key whose windows or sweep alone are due stay frozen through
	// the advance (postpone), and then at is a watermark its record still
	// holds at: the one before that advance.
	eager int64
	at    int64
	chunk int32
	off   int32
	klen  int32
	rlen  int32
	heap  int32 // its position in wakes, or -1
	// counted says its patterns' partial matches and drops are in the
	// operators' cold counts: frozen by the task, not restored frozen.
	counted bool
	// late says an advance reached its windows' or sweep's wake and left it
	// frozen (postpone): it thaws at at, its windows overdue, and wake is
	// eager.
	late bool
}

// coldChunk is the size of a chunk; a larger record has one of its own.
const coldChunk = 256 << 10

func (c *coldKeys) len() int { return len(c.ents) }

// bytes is the chunks' size: what the frozen keys take, with the garbage
// not yet compacted.
func (c *coldKeys) bytes() int { return c.live + c.garbage }

func (c *coldKeys) key(i int) []byte {
	en := &c.ents[i]
	return c.chunks[en.chunk][en.off : en.off+en.klen]
}

func (c *coldKeys) rec(i int) []byte {
	en := &c.ents[i]
	from := en.off + en.klen
	return c.chunks[en.chunk][from : from+en.rlen]
}

// find returns the entry of key (hash h), or -1.
func (c *coldKeys) find(key string, h uint64) int {
	if len(c.ents) == 0 {
		return -1
	}
	mask := len(c.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := c.slots[i]
		if sl.e == 0 {
			return -1
		}
		if sl.h == h && string(c.key(int(sl.e-1))) == key {
			return int(sl.e - 1)
		}
	}
}

// put adds key (hash h), which c does not hold, with its record, its wake
// and the wake of its patterns and joins (eager).
func (c *coldKeys) put(key string, h uint64, rec []byte, wake, eager int64, counted bool) {
	if c.garbage > c.live && c.garbage >= 4*coldChunk {
		c.compact()
	}
	n := len(key) + len(rec)
	chunk, off := c.room(n)
	b := append(append(c.chunks[chunk], key...), rec...)
	c.chunks[chunk] = b
	c.live += n
	i := len(c.ents)
	c.ents = append(c.ents, coldEntry{h: h, wake: wake, eager: eager, chunk: int32(chunk), off: int32(off),
		klen: int32(len(key)), rlen: int32(len(rec)), heap: -1, counted: counted})
	if (len(c.ents))*4 > len(c.slots)*3 {
		c.resize(max(minKeyTable, 2*len(c.slots)))
	} else {
		c.place(coldSlot{h: h, e: int32(i + 1)})
	}
	if wake != stream.MaxTime {
		c.ents[i].heap = int32(len(c.wakes))
		c.wakes = append(c.wakes, int32(i))
		c.up(len(c.wakes) - 1)
	}
}

// room returns the chunk and offset n more bytes go to.
func (c *coldKeys) room(n int) (int, int) {
	if last := len(c.chunks) - 1; last >= 0 {
		if b := c.chunks[last]; cap(b)-len(b) >= n {
			return last, len(b)
		}
	}
	c.chunks = append(c.chunks, make([]byte, 0, max(coldChunk, n)))
	return len(c.chunks) - 1, 0
}

// compact copies the live entries into new chunks, giving the garbage back.
func (c *coldKeys) compact() {
	old := c.chunks
	c.chunks, c.garbage = nil, 0
	for i := range c.ents {
		en := &c.ents[i]
		n := int(en.klen + en.rlen)
		chunk, off := c.room(n)
		c.chunks[chunk] = append(c.chunks[chunk], old[en.chunk][en.off:int(en.off)+n]...)
		en.chunk, en.off = int32(chunk), int32(off)
	}
}

// reserve makes room for n more keys, so that a restore that adds them
// does not grow the table on the way.
func (c *coldKeys) reserve(n int) {
	c.ents = slices.Grow(c.ents, n)
	if size := slotsFor(len(c.ents)+n, len(c.slots)); size > len(c.slots) {
		c.resize(size)
	}
}

// place puts sl in the first empty slot of its probe.
func (c *coldKeys) place(sl coldSlot) {
	mask := len(c.slots) - 1
	i := int(sl.h) & mask
	for c.slots[i].e != 0 {
		i = (i + 1) & mask
	}
	c.slots[i] = sl
}

func (c *coldKeys) resize(size int) {
	c.slots = make([]coldSlot, size)
	for i := range c.ents {
		c.place(coldSlot{h: c.ents[i].h, e: int32(i + 1)})
	}
}

// slot returns the position of entry i's slot.
func (c *coldKeys) slot(i int) int {
	mask := len(c.slots) - 1
	j := int(c.ents[i].h) & mask
	for c.slots[j].e != int32(i+1) {
		j = (j + 1) & mask
	}
	return j
}

// remove forgets entry i. Its bytes stay where they are (views of them
// remain valid); the last entry takes its index.
func (c *coldKeys) remove(i int) {
	en := c.ents[i]
	if en.heap >= 0 {
		c.removeWake(int(en.heap))
	}
	// The slot, by backward shift (see keyTable.delete).
	mask := len(c.slots) - 1
	hole := c.slot(i)
	for j := hole; ; {
		j = (j + 1) & mask
		sl := c.slots[j]
		if sl.e == 0 {
			break
		}
		if home := int(sl.h) & mask; (j-home)&mask < (j-hole)&mask {
			continue
		}
		c.slots[hole] = sl
		hole = j
	}
	c.slots[hole] = coldSlot{}
	n := int(en.klen + en.rlen)
	c.live -= n
	c.garbage += n
	last := len(c.ents) - 1
	if i != last {
		c.slots[c.slot(last)].e = int32(i + 1)
		c.ents[i] = c.ents[last]
		if h := c.ents[i].heap; h >= 0 {
			c.wakes[h] = int32(i)
		}
	}
	c.ents = c.ents[:last]
	if len(c.ents) == 0 {
		*c = coldKeys{} // give everything back
	} else if len(c.slots) > minKeyTable && len(c.ents)*8 < len(c.slots) {
		c.resize(len(c.slots) / 2)
	}
}

// postpone leaves entry i, whose windows or sweep are due, frozen after an
// advance from watermark at: its wake becomes its eager wake (late).
func (c *coldKeys) postpone(i int, at int64) {
	en := &c.ents[i]
	en.late, en.at, en.wake = true, at, en.eager
	switch {
	case en.heap < 0:
	case en.wake == stream.MaxTime:
		c.removeWake(int(en.heap))
	default:
		c.down(int(en.heap))
		c.up(int(en.heap))
	}
}

// due returns an entry whose wake is at or before wm, or -1.
func (c *coldKeys) due(wm int64) int {
	if len(c.wakes) == 0 || c.ents[c.wakes[0]].wake > wm {
		return -1
	}
	return int(c.wakes[0])
}

// The wake heap: wakes holds entry indexes, each entry its position.

func (c *coldKeys) less(a, b int) bool {
	return c.ents[c.wakes[a]].wake < c.ents[c.wakes[b]].wake
}

func (c *coldKeys) swap(a, b int) {
	c.wakes[a], c.wakes[b] = c.wakes[b], c.wakes[a]
	c.ents[c.wakes[a]].heap = int32(a)
	c.ents[c.wakes[b]].heap = int32(b)
}

func (c *coldKeys) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !c.less(i, p) {
			return
		}
		c.swap(i, p)
		i = p
	}
}

func (c *coldKeys) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(c.wakes) {
			return
		}
		m := l
		if r := l + 1; r < len(c.wakes) && c.less(r, l) {
			m = r
		}
		if !c.less(m, i) {
			return
		}
		c.swap(i, m)
		i = m
	}
}

func (c *coldKeys) removeWake(i int) {
	last := len(c.wakes) - 1
	c.ents[c.wakes[i]].heap = -1
	if i != last {
		c.wakes[i] = c.wakes[last]
		c.ents[c.wakes[i]].heap = int32(i)
	}
	c.wakes = c.wakes[:last]
	if i != last {
		c.down(i)
		c.up(i)
	}
}
