package engine

import (
	"slices"
	"sort"

	"github.com/vigil-cep/vigil/internal/codec"
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
// of past. A history is then two pointer-free arrays for the collector to
// skip rather than a row object per event to mark; a checkpoint copies enc
// instead of encoding the rows again; a restore copies it after checking it.
type history struct {
	past []rules.Past
	enc  []byte
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
	if cap(h.enc) == 0 {
		// Room for historyCap entries like this one, as past has.
		h.enc = make([]byte, 0, historyCap*(len(value)+16))
	}
	if i := h.place(t, m); i < h.len()-1 {
		h.enc = slices.Insert(h.enc, h.offset(i), appendEntry(nil, t, value, m, errs)...)
	} else {
		h.enc = appendEntry(h.enc, t, value, m, errs)
	}
}

// addEntry is add for an event whose entry is already encoded.
func (h *history) addEntry(t int64, entry []byte, m rules.Mark) {
	if i := h.place(t, m); i < h.len()-1 {
		h.enc = slices.Insert(h.enc, h.offset(i), entry...)
	} else {
		h.enc = append(h.enc, entry...)
	}
}

// place inserts an event's time and marks in past, keeping time order, and
// returns its position; its entry goes in the same place in enc.
func (h *history) place(t int64, m rules.Mark) int {
	if cap(h.past) == 0 {
		h.past = make([]rules.Past, 0, historyCap)
	}
	i := len(h.past)
	for i > 0 && h.past[i-1].Time > t {
		i--
	}
	h.past = slices.Insert(h.past, i, rules.Past{Time: t, Mark: m})
	return i
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
	d := codec.NewDecoder(h.enc)
	for range i {
		skipEntry(d)
	}
	return len(h.enc) - d.Len()
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

// len is how many events it holds.
func (h *history) len() int { return len(h.past) }

// evict drops events older than horizon, and the oldest beyond maxLen; it
// returns how many it dropped for the cap (overflow, reported in stats).
func (h *history) evict(horizon int64, maxLen int) (overflow int) {
	n := sort.Search(len(h.past), func(i int) bool { return h.past[i].Time >= horizon })
	if extra := len(h.past) - n - maxLen; extra > 0 {
		n += extra
		overflow = extra
	}
	if n == 0 {
		return 0
	}
	// Move the survivors to the front rather than reslicing: the arrays
	// keep their capacity, so the next appends do not reallocate.
	at := h.offset(n)
	k := copy(h.past, h.past[n:])
	h.past = h.past[:k]
	h.enc = h.enc[:copy(h.enc, h.enc[at:])]
	if cap(h.past) > 64 && k < cap(h.past)/4 {
		h.past = slices.Clone(h.past) // release arrays sized for a burst
		h.enc = slices.Clone(h.enc)
	}
	return overflow
}

// span returns the positions [lo, hi) of the events with time in [from, to].
func (h *history) span(from, to int64) (lo, hi int) {
	lo = sort.Search(len(h.past), func(i int) bool { return h.past[i].Time >= from })
	hi = sort.Search(len(h.past), func(i int) bool { return h.past[i].Time > to })
	return lo, max(lo, hi)
}

// between returns the events with time in [from, to]. The result aliases the
// store with its capacity clipped, so a caller cannot append into it.
func (h *history) between(from, to int64) []rules.Past {
	lo, hi := h.span(from, to)
	if lo == hi {
		return nil
	}
	return h.past[lo:hi:hi]
}

// failure returns the error of element predicate k on the ith event, whose
// mark says it failed.
func (h *history) failure(i, k int) string {
	d := codec.NewDecoder(h.enc[h.offset(i):])
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
	d := codec.NewDecoder(h.enc[h.offset(lo):])
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
