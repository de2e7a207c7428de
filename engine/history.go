package engine

import (
	"slices"
	"sort"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/internal/prefetch"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// history is one key's events of one stream, sorted by event time (arrival
// order among equal times), for history() in rules (docs/design.md
// "History").
//
// Each event's time and element-predicate results are side by side in past,
// which the native queries scan. What history keeps of an event (a row of
// the fields rules read, or the whole field map) is read far more rarely: by
// an expression that reads past events' fields, the entity view, a restore
// under another ruleset version. So it stays encoded, in enc: every event's
// entry as a checkpoint writes it (entry below), back to back in the order
// of past. A checkpoint copies enc instead of encoding the rows again; a
// restore copies it after checking it.
//
// Both are one block without pointers, b: a header (histHeader), room for
// past, then enc to the end of b, whose capacity is room for more entries.
// A history is then one object for the collector to mark and none to scan,
// behind a 24-byte slice header in the key's state (docs/design.md
// "Memory"); b is nil while it holds nothing.
type history struct {
	b []byte
}

// histHeader starts a history's block.
type histHeader struct {
	n    uint32 // events held
	room uint32 // events past has room for
}

const (
	histHeaderSize = int(unsafe.Sizeof(histHeader{}))
	pastSize       = int(unsafe.Sizeof(rules.Past{}))
)

// newHistBlock returns a history block that holds past and enc, with room
// for room events (at least len(past), and at least one: a block's past
// starts inside it) and encCap bytes of entries (at least len(enc)). It is
// allocated as words, so that past, which holds 64-bit fields, is aligned.
func newHistBlock(past []rules.Past, enc []byte, room, encCap int) []byte {
	size := histHeaderSize + room*pastSize + encCap
	words := make([]uint64, (size+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 8*len(words))
	*header(b) = histHeader{n: uint32(len(past)), room: uint32(room)}
	copy(pastRoom(b), past)
	return append(b[:histHeaderSize+room*pastSize], enc...)
}

// header returns the header of block b.
func header(b []byte) *histHeader { return (*histHeader)(unsafe.Pointer(unsafe.SliceData(b))) }

// pastRoom returns block b's room for past, all of it.
func pastRoom(b []byte) []rules.Past {
	return unsafe.Slice((*rules.Past)(unsafe.Pointer(&b[histHeaderSize])), header(b).room)
}

// len is how many events it holds.
func (h *history) len() int {
	if h.b == nil {
		return 0
	}
	return int(header(h.b).n)
}

// past returns the events' times and marks, in time order: a view of the
// block, valid until the history next changes.
func (h *history) past() []rules.Past {
	if h.b == nil {
		return nil
	}
	return pastRoom(h.b)[:header(h.b).n]
}

// maxPrefetchPast is how many events' times and marks prefetch loads.
const maxPrefetchPast = 16

// prefetch starts loading the start of the block: its header and the times
// and marks of its first maxPrefetchPast events (all of them, for most
// keys), which eviction searches and history() reads. It reads only the
// slice header, in the key's state: reading the block's header to find the
// last events would wait for the very load it is to start.
func (h *history) prefetch() {
	if n := min(len(h.b), histHeaderSize+maxPrefetchPast*pastSize); n > 0 {
		prefetch.Range(unsafe.Pointer(unsafe.SliceData(h.b)), uintptr(n))
	}
}

// encStart is where enc starts in the block.
func (h *history) encStart() int { return histHeaderSize + int(header(h.b).room)*pastSize }

// enc returns the events' entries, in the order of past: a view of the
// block, valid until the history next changes.
func (h *history) enc() []byte {
	if h.b == nil {
		return nil
	}
	return h.b[h.encStart():]
}

// grow moves the history to a block with room for events more events and
// encMore more bytes of entries, doubling what it had, or to a first block
// of historyCap events (or events, when more) with encMore bytes for each.
func (h *history) grow(events, encMore int) {
	if h.b == nil {
		room := max(historyCap, events)
		h.b = newHistBlock(nil, nil, room, room*encMore)
		return
	}
	past, enc := h.past(), h.enc()
	room, encCap := cap(past), cap(enc)
	if len(past)+events > room {
		room = max(2*room, len(past)+events)
	}
	if len(enc)+encMore > encCap {
		encCap = max(2*encCap, len(enc)+encMore)
	}
	if room == cap(past) && encCap == cap(enc) {
		return
	}
	h.b = newHistBlock(past, enc, room, encCap)
}

// An entry is, in the notation of package state (u = Uvarint, s = Varint):
//
//	time     s
//	row      bool: the value is a row (stream.AppendRow) rather than a whole
//	         map (codec Value)
//	value    the row or the map
//	set      u  the element predicates that held
//	failed   u  those that failed
//	errors   u  0, or 1 + the count of the failed predicates' messages, then
//	         each message as a string
//
// It is layout 1's and 2's history entry (snapshot.go): a snapshot holds a
// history's entries exactly as enc does.

// historyCap is the capacity a key's history starts with: most keys keep a
// few events, and room for them at once saves growing through 1 and 2.
const historyCap = 4

// add inserts an event, keeping time order: its time, its value as
// historyValue encodes it, and its marks. Events mostly arrive in order, so
// the search starts from the end.
func (h *history) add(t int64, value []byte, m rules.Mark, errs []string) {
	n := entryLen(t, value, m, errs)
	h.grow(1, n)
	h.b = appendEntry(h.b, t, value, m, errs) // within the block: grow made room
	h.insert(t, m, n)
}

// addEntry is add for an event whose entry is already encoded.
func (h *history) addEntry(t int64, entry []byte, m rules.Mark) {
	h.grow(1, len(entry))
	h.b = append(h.b, entry...)
	h.insert(t, m, len(entry))
}

// insert places an event whose entry, of n bytes, was just appended to enc
// (past has room for it): its time and marks go in past, in time order, and
// its entry moves to the same place in enc.
func (h *history) insert(t int64, m rules.Mark, n int) {
	hd := header(h.b)
	past := h.past()[:hd.n+1]
	i := int(hd.n)
	for i > 0 && past[i-1].Time > t {
		i--
	}
	copy(past[i+1:], past[i:])
	past[i] = rules.Past{Time: t, Mark: m}
	hd.n++
	if i < int(hd.n)-1 {
		// Out of order: move the entry from the end of enc to i's place,
		// turning the bytes after that place in three reversals.
		tail := h.enc()[h.offset(i):]
		slices.Reverse(tail)
		slices.Reverse(tail[:n])
		slices.Reverse(tail[n:])
	}
}

// entryLen is the length of the entry appendEntry appends.
func entryLen(t int64, value []byte, m rules.Mark, errs []string) int {
	n := codec.VarintLen(t) + len(value) + codec.UvarintLen(m.Set) + codec.UvarintLen(m.Failed)
	if errs == nil {
		return n + 1
	}
	n += codec.UvarintLen(uint64(len(errs) + 1))
	for _, s := range errs {
		n += codec.UvarintLen(uint64(len(s))) + len(s)
	}
	return n
}

// appendEntry appends an entry (above) to b.
func appendEntry(b []byte, t int64, value []byte, m rules.Mark, errs []string) []byte {
	e := codec.NewEncoder(b)
	e.Varint(t)
	e.Raw(value)
	e.Uvarint(m.Set)
	e.Uvarint(m.Failed)
	if errs == nil {
		e.Int(0)
	} else {
		e.Int(len(errs) + 1)
		for _, s := range errs {
			e.String(s)
		}
	}
	return e.Bytes()
}

// historyValue encodes what history keeps of an event for add: the row of
// the fields in keep, or, when keep is nil, the whole field map.
func historyValue(fields map[string]any, keep []string) ([]byte, error) {
	var e codec.Encoder
	err := appendHistoryValue(&e, fields, keep)
	return e.Bytes(), err
}

// appendHistoryValue is historyValue appending to e.
func appendHistoryValue(e *codec.Encoder, fields map[string]any, keep []string) error {
	e.Bool(keep != nil)
	if keep != nil {
		return stream.AppendRow(e, keep, fields)
	}
	return e.Value(fields)
}

// appendHistorySlots is appendHistoryValue for an event decoded into
// slots (keep[i] is slots[at[i]]): a stream decoded so keeps rows, never
// whole maps.
func appendHistorySlots(e *codec.Encoder, keep []string, at []int, slots []any) error {
	e.Bool(true)
	return stream.AppendRowFromSlots(e, keep, at, slots, rules.Absent)
}

// offset returns where the ith entry starts in enc.
func (h *history) offset(i int) int {
	enc := h.enc()
	d := codec.NewDecoder(enc)
	for range i {
		skipEntry(d)
	}
	return len(enc) - d.Len()
}

// skipEntry reads past one entry. enc holds only entries add wrote or a
// restore checked, so the reads cannot fail.
func skipEntry(d *codec.Decoder) {
	d.Varint()
	skipValue(d)
	readMarks(d)
}

// skipValue reads past an entry's value.
func skipValue(d *codec.Decoder) {
	if d.Bool() {
		for range d.Int() {
			if d.Bool() {
				d.SkipValue()
			}
		}
	} else {
		d.SkipValue()
	}
}

// readMarks reads an entry's marks, and reads past its errors, checking
// them (failure reads one back).
func readMarks(d *codec.Decoder) rules.Mark {
	mk := rules.Mark{Set: d.Uvarint(), Failed: d.Uvarint()}
	for i, ne := 0, d.Int(); i < ne-1 && d.Err() == nil; i++ {
		d.StringBytes()
	}
	return mk
}

// evict drops events older than horizon, and the oldest beyond maxLen; it
// returns how many it dropped for the cap (overflow, reported in stats).
func (h *history) evict(horizon int64, maxLen int) (overflow int) {
	past := h.past()
	n := sort.Search(len(past), func(i int) bool { return past[i].Time >= horizon })
	if extra := len(past) - n - maxLen; extra > 0 {
		n += extra
		overflow = extra
	}
	if n == 0 {
		return 0
	}
	// Move the survivors to the front rather than reslicing: the block
	// keeps its room, so the next adds do not reallocate.
	enc, at := h.enc(), h.offset(n)
	k := copy(past, past[n:])
	header(h.b).n = uint32(k)
	h.b = h.b[:h.encStart()+copy(enc, enc[at:])]
	if cap(past) > 64 && k < cap(past)/4 {
		h.shrink() // release a block sized for a burst
	}
	return overflow
}

// shrink moves the history to a block of exactly its size, or to none when
// it holds no event.
func (h *history) shrink() {
	past, enc := h.past(), h.enc()
	if len(past) == 0 {
		h.b = nil
		return
	}
	h.b = newHistBlock(past, enc, len(past), len(enc))
}

// span returns the positions [lo, hi) of the events with time in [from, to].
func (h *history) span(from, to int64) (lo, hi int) {
	past := h.past()
	lo = sort.Search(len(past), func(i int) bool { return past[i].Time >= from })
	hi = sort.Search(len(past), func(i int) bool { return past[i].Time > to })
	return lo, max(lo, hi)
}

// between returns the events with time in [from, to]. The result aliases the
// store with its capacity clipped, so a caller cannot append into it.
func (h *history) between(from, to int64) []rules.Past {
	lo, hi := h.span(from, to)
	if lo == hi {
		return nil
	}
	return h.past()[lo:hi:hi]
}

// failure returns the error of element predicate k on the ith event, whose
// mark says it failed.
func (h *history) failure(i, k int) string {
	d := codec.NewDecoder(h.enc()[h.offset(i):])
	d.Varint()
	skipValue(d)
	d.Uvarint() // set
	d.Uvarint() // failed
	for j, n := 0, d.Int()-1; j < n; j++ {
		if s := d.StringBytes(); j == k {
			return string(s)
		}
	}
	return ""
}

// values builds what history keeps of the events [lo, hi): their rows over
// names (stream.Row), or their whole field maps.
func (h *history) values(lo, hi int, names []string) []any {
	if lo >= hi {
		return nil
	}
	d := codec.NewDecoder(h.enc()[h.offset(lo):])
	vs := make([]any, 0, hi-lo)
	for range hi - lo {
		d.Varint()
		if d.Bool() {
			vs = append(vs, stream.DecodeRow(d, names))
		} else {
			vs = append(vs, d.Value())
		}
		readMarks(d)
	}
	return vs
}
