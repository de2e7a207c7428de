package engine

import (
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/stream"
)

// Cold keys (docs/design.md "Idle keys, kept as their records").
//
// A key no checkpoint interval has changed for a while is kept as its
// checkpoint record (encodeKeyRecord) in large byte chunks that hold no
// pointer, instead of as the five objects or so its state takes in the
// task and its operators. The collector marks a chunk and does not scan it,
// so a cycle costs what the keys in use cost, not every key held: at a
// million users most are idle, and marking their objects was most of every
// cycle (docs/performance.md). A key thaws, decoded as a restore decodes
// it, when it is next looked up (an event, a query, a decision waiting for
// the watermark) or before the watermark reaches the first time at which
// the task would change its state on its own (wake: a window firing or
// dropping, a pattern's deadline or buffered events, a join dropping
// elements, the sweep forgetting it). Since a record restores the key's
// state exactly, a task goes on byte for byte as if the key had never been
// frozen, whichever keys freeze and when (TestColdKeys); the policy (Cool)
// only decides what it costs.
//
// Like Flink's RocksDB state backend, which keeps state serialized outside
// the JVM heap, and for the same reason, but without a second store: the
// record is the one checkpoints already write, and a frozen key's record is
// what the next checkpoint copies.

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
	h     uint64
	wake  int64 // the watermark before which the key must thaw
	chunk int32
	off   int32
	klen  int32
	rlen  int32
	heap  int32 // its position in wakes, or -1
	// counted says its patterns' partial matches and drops are in the
	// operators' cold counts: frozen by the task, not restored frozen.
	counted bool
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

// put adds key (hash h), which c does not hold, with its record.
func (c *coldKeys) put(key string, h uint64, rec []byte, wake int64, counted bool) {
	if c.garbage > c.live && c.garbage >= 4*coldChunk {
		c.compact()
	}
	n := len(key) + len(rec)
	chunk, off := c.room(n)
	b := append(append(c.chunks[chunk], key...), rec...)
	c.chunks[chunk] = b
	c.live += n
	i := len(c.ents)
	c.ents = append(c.ents, coldEntry{h: h, wake: wake, chunk: int32(chunk), off: int32(off),
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
	n += len(c.ents)
	c.ents = slices.Grow(c.ents, n-len(c.ents))
	size := max(minKeyTable, len(c.slots))
	for n*4 > size*3 {
		size *= 2
	}
	if size > len(c.slots) {
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

// warmLead (Task.warmLead; tests set less) is how far ahead of the watermark a frozen key's wake may be
// for Warm to thaw it, and how close to it a key's wake keeps it from
// freezing: a minute of event time, in which a live stream's keys due at
// one time (a tumbling window's end: every key that paid in the hour) thaw
// a slice at a time rather than all at once when the watermark gets there.
const warmLead = 60_000

// freeze moves the state of ks's key out of the task and its operators into
// t.cold, as its record, unless its wake is within warmLead of the
// watermark (it reports whether it froze the key).
func (t *Task) freeze(ks *keyState) bool {
	key := ks.key
	wake := t.wake(ks)
	if wake <= stream.AddSat(t.wm, t.warmLead) {
		return false
	}
	e := codec.NewEncoder(t.coldBuf[:0])
	if err := t.encodeKeyRecord(e, key); err != nil {
		return false // an event value the codec cannot write: the key stays as it is
	}
	t.coldBuf = e.Bytes()
	for _, op := range t.windows {
		op.RemoveKey(key)
	}
	for _, op := range t.patterns {
		if pk := op.keys[key]; pk != nil {
			op.coldDropped += pk.state.Dropped()
			op.coldPartials += pk.state.Len()
			pk.live = false
			pk.due = stream.MaxTime // its entries in op.due go stale
			delete(op.keys, key)
		}
	}
	for _, jo := range t.joins {
		jo.op.RemoveKey(key)
	}
	if ks.slot > 0 {
		t.idle.unlist(ks)
	}
	h := keyHash(key)
	t.keys.delete(ks)
	t.cold.put(key, h, t.coldBuf, wake, true)
	return true
}

// wake returns the first watermark at which the task would change the state
// of ks's key on its own.
func (t *Task) wake(ks *keyState) int64 {
	// The sweep drops the key once the horizon of the longest retention
	// has passed its bucket (sweepQueue.due).
	wake := stream.MaxTime
	if ks.slot > 0 {
		wake = stream.AddSat(stream.AddSat(ks.bucket*sweepEvery, sweepEvery), t.maxRetain)
	}
	for _, op := range t.windows {
		wake = min(wake, op.NextTimer(ks.key))
	}
	for _, op := range t.patterns {
		if pk := op.keys[ks.key]; pk != nil {
			wake = min(wake, pk.due)
		}
	}
	for _, jo := range t.joins {
		wake = min(wake, jo.op.NextDue(ks.key))
	}
	return wake
}

// recordWake returns the wake of the key whose record (written under
// layout m) is rec, read without decoding it: the sweep's from its last
// event time, a pattern's due time, and for its windows the first one's end
// (less one), at or before every window's timer (armed at end-1, cleaned up
// later). It reports false for a record with join state, whose wake it
// would have to decode, and for one it cannot read.
func (t *Task) recordWake(rec []byte, m *layoutMap) (int64, bool) {
	d := codec.NewDecoder(rec)
	wake := stream.MaxTime
	if d.Bool() {
		last := d.Varint()
		wake = stream.AddSat(stream.AddSat(bucketOf(last)*sweepEvery, sweepEvery), t.maxRetain)
		for range d.Count(2) {
			si := d.Int()
			if si >= len(m.streams) {
				return 0, false
			}
			for range d.Count(4) {
				readEntry(d, m.streams[si].fields, -1)
			}
		}
	}
	for range d.Count(2) {
		if d.Int() >= len(m.windows) {
			return 0, false
		}
		w := codec.NewDecoder(d.View())
		if w.Count(1) > 0 {
			start, length := w.Varint(), w.Uvarint()
			if w.Err() != nil || length > uint64(math.MaxInt64) {
				return 0, false
			}
			wake = min(wake, stream.AddSat(start, int64(length)-1))
		}
	}
	for range d.Count(2) {
		if d.Int() >= len(m.patterns) {
			return 0, false
		}
		p := codec.NewDecoder(d.View())
		p.Varint() // the clock
		due := p.Varint()
		if p.Err() != nil {
			return 0, false
		}
		wake = min(wake, due)
	}
	if d.Count(2) > 0 || d.Finish() != nil {
		return 0, false
	}
	return wake, true
}

// thaw puts the state of the frozen key of entry i back, as a restore does,
// untouched since the last cut as far as tracking goes.
func (t *Task) thaw(i int) {
	key := string(t.cold.key(i))
	rec := t.cold.rec(i) // stays valid: chunks are only appended to
	counted := t.cold.ents[i].counted
	t.cold.remove(i)
	if t.coldLayout == nil {
		m, err := t.readLayout(t.layout())
		if err != nil {
			panic(fmt.Sprintf("engine: the task's own layout: %v", err))
		}
		t.coldLayout = m
	}
	if err := t.decodeKeyRecord(key, rec, t.coldLayout); err != nil {
		// A record restored frozen that does not decode: its checkpoint
		// passed its checksum, so it was written so (a bug, or a file made
		// to). What of it was decoded goes too, and the loss is counted
		// (Stats.ThawErrors), rather than the task stopping.
		t.forget(key)
		t.stats.ThawErrors++
		t.lastThawError = fmt.Errorf("key %q: %w", key, err)
		return
	}
	if ks := t.keys.get(key, keyHash(key)); ks != nil {
		ks.stamp = t.epoch - 1 // its next change is one since the cut (touch)
	}
	if counted {
		for _, op := range t.patterns {
			if pk := op.keys[key]; pk != nil {
				op.coldDropped -= pk.state.Dropped()
				op.coldPartials -= pk.state.Len()
			}
		}
	}
}

// forget drops what the task and its operators hold of key, as freeze does
// but keeping nothing.
func (t *Task) forget(key string) {
	for _, op := range t.windows {
		op.RemoveKey(key)
	}
	for _, op := range t.patterns {
		if pk := op.keys[key]; pk != nil {
			pk.live, pk.due = false, stream.MaxTime
			delete(op.keys, key)
		}
	}
	for _, jo := range t.joins {
		jo.op.RemoveKey(key)
	}
	if ks := t.keys.get(key, keyHash(key)); ks != nil {
		if ks.slot > 0 {
			t.idle.unlist(ks)
		}
		t.keys.delete(ks)
	}
}

// ThawError returns the last error of a frozen key that could not be
// thawed (Stats.ThawErrors counts them), or nil.
func (t *Task) ThawError() error { return t.lastThawError }

// thawKey thaws key (hash h) if it is frozen.
func (t *Task) thawKey(key string, h uint64) {
	if t.cold.len() > 0 {
		if i := t.cold.find(key, h); i >= 0 {
			t.thaw(i)
		}
	}
}

// thawDue thaws every key whose wake is at or before wm: all of them at the
// maximum watermark, which ends every partial match (endPattern).
func (t *Task) thawDue(wm int64) {
	if wm == stream.MaxTime {
		for t.cold.len() > 0 {
			t.thaw(t.cold.len() - 1)
		}
		return
	}
	for i := t.cold.due(wm); i >= 0; i = t.cold.due(wm) {
		t.thaw(i)
	}
}

// Epoch numbers the task's cuts: it grows by one at each Cut (and Track).
// A key's last change is in the epoch that was current then.
func (t *Task) Epoch() uint32 { return t.epoch }

// Cool freezes, for about budget, the keys whose last change came before
// epoch (Epoch), going on through the task's keys from where the last call
// stopped; it reports whether it has been through all of them since the
// pass began. A budget of 0 or less makes the whole pass. Only a tracked
// task between cuts freezes keys (a key's epoch is known only there);
// otherwise Cool does nothing and reports true.
//
// A driver calls it a slice at a time between batches, as it calls Step,
// with the epoch of a cut a while ago: the keys no change has touched
// since. Which keys freeze changes nothing but cost (see above).
func (t *Task) Cool(budget time.Duration, epoch uint32) bool {
	if !t.track || t.cut != nil {
		return true
	}
	start := time.Now()
	for n := 0; ; n++ {
		slots := t.keys.slots
		if t.coolAt >= len(slots) {
			t.coolAt = 0
			t.keys.shrink()
			return true
		}
		if budget > 0 && n%64 == 63 && time.Since(start) >= budget {
			return false
		}
		// A freeze deletes from the table by backward shift, which may
		// move a later key into this slot: look at it again then.
		if ks := slots[t.coolAt].ks; ks != nil && int32(epoch-ks.stamp) > 0 && t.freeze(ks) {
			continue // the slot now holds another key, or none
		}
		t.coolAt++
	}
}

// Warm thaws, for about budget (0 or less: all of them), the frozen keys
// whose wake is within warmLead of the watermark, and reports whether none
// is left. A driver calls it a slice at a time between batches while
// Warming says there are some.
func (t *Task) Warm(budget time.Duration) bool {
	start := time.Now()
	for n := 0; ; n++ {
		i := t.cold.due(stream.AddSat(t.wm, t.warmLead))
		if i < 0 || t.wm == stream.MinTime {
			return true
		}
		if budget > 0 && n%16 == 15 && time.Since(start) >= budget {
			return false
		}
		t.thaw(i)
	}
}

// Warming reports whether Warm has keys to thaw.
func (t *Task) Warming() bool {
	return t.wm != stream.MinTime && t.cold.due(stream.AddSat(t.wm, t.warmLead)) >= 0
}

// Cold returns how many keys are frozen, and the bytes they take.
func (t *Task) Cold() (keys, bytes int) { return t.cold.len(), t.cold.bytes() }

// coldView is a string viewing b, which never changes: a frozen key's bytes.
func coldView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
