package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// Extractor is the stateless half of processing a record, which a decode
// stage can run ahead of the task on other goroutines (docs/design.md
// "Architecture", a record's path): decode the value, evaluate the
// stream's key, time and id expressions, and prepare what history keeps of
// the event. Not safe for concurrent use: each goroutine has its own.
type Extractor struct {
	rs *rules.Ruleset
	ev *rules.Evaluator
	// histAt is, per stream decoded into slots, where each of its
	// HistoryFields is among its DecodeFields; nil for other streams.
	histAt [][]int
	slab   []any // where newSlots takes slots from, when no Slab is in use
	// rows is where project encodes records' rows for history: each row a
	// slice of one chunk until the chunk is full, so that a row costs no
	// allocation of its own. A chunk is garbage once the task has kept its
	// records' rows (history copies them).
	rows []byte
	// arena, when set (UseSlab), is where newSlots takes slots from
	// instead, for its owner to recycle.
	arena *Slab
}

// rowChunk is the size of the chunks of Extractor.rows; a new one starts
// when less than rowRoom is left (a longer row grows out of the chunk into
// an allocation of its own).
const (
	rowChunk = 64 << 10
	rowRoom  = 256
)

// NewExtractor returns an Extractor for rs.
func NewExtractor(rs *rules.Ruleset) (*Extractor, error) {
	ev, err := rs.NewEvaluator((*rules.Recorded)(nil)) // it evaluates no rule: no history
	if err != nil {
		return nil, err
	}
	x := &Extractor{rs: rs, ev: ev, histAt: make([][]int, len(rs.Streams))}
	for i, st := range rs.Streams {
		if st.DecodeFields == nil {
			continue
		}
		at := make([]int, len(st.HistoryFields))
		for j, f := range st.HistoryFields {
			at[j] = slices.Index(st.DecodeFields, f)
		}
		if !slices.Contains(at, -1) { // history keeps only fields decoded: always so
			x.histAt[i] = at
		}
	}
	return x, nil
}

// slotted reports whether events of stream s decode into slots.
func (x *Extractor) slotted(s int) bool { return x.histAt[s] != nil }

// slotChunk is how many slots newSlots allocates at a time.
const slotChunk = 16 << 10

// newSlots returns n slots, each rules.Absent, for one event. They come
// from a chunk shared with the events decoded before and after it, which
// lives as long as any of them: an event's slots are read while the task
// processes it, and not kept. The chunk is the Slab's in use, if any, which
// its owner recycles (Slab.Free).
func (x *Extractor) newSlots(n int) []any {
	slab := &x.slab
	if x.arena != nil {
		slab = &x.arena.cur
	}
	if len(*slab)+n > cap(*slab) {
		if x.arena != nil {
			if cap(*slab) > 0 {
				x.arena.full = append(x.arena.full, *slab)
			}
			*slab = getSlotChunk(n)
		} else {
			*slab = make([]any, 0, max(slotChunk, n))
		}
	}
	s := (*slab)[len(*slab) : len(*slab)+n : len(*slab)+n]
	*slab = (*slab)[:len(*slab)+n]
	for i := range s {
		s[i] = rules.Absent
	}
	return s
}

// Slab holds the slots of the records an Extractor decodes while the Slab
// is in use (UseSlab): a stream whose expressions read only some fields
// (rules.Stream.DecodeFields) has them decoded into slots, not a map, and
// the slots of many records share chunks. A driver that knows when a run of
// records is done with (a replay batch, once its tasks have processed it)
// gives the run a Slab and frees it then, so that the chunks are reused, not
// allocated afresh for every run: fresh, they were a tenth of replay's
// allocations. The zero value is an empty Slab. Not safe for concurrent
// use; once decoding is over, the Slab is only read, through its records.
type Slab struct {
	cur  []any   // the chunk being filled
	full [][]any // the chunks filled before it
}

// UseSlab makes x take the slots of the records it decodes from s, until the
// next UseSlab; nil makes it allocate them, for the garbage collector to
// free with the last record that uses them (the default).
func (x *Extractor) UseSlab(s *Slab) { x.arena = s }

// Free recycles the Slab's chunks and empties it. The records whose slots it
// holds must not be used any more: the chunks go to other records.
func (s *Slab) Free() {
	for _, c := range s.full {
		putSlotChunk(c)
	}
	putSlotChunk(s.cur)
	clear(s.full)
	s.cur, s.full = nil, s.full[:0]
}

// slotPool recycles the chunks of freed Slabs.
var slotPool sync.Pool // of *[]any, empty, cleared

// putSlotChunk recycles a chunk, if there is one.
func putSlotChunk(c []any) {
	if cap(c) == 0 {
		return
	}
	clear(c) // no pointers into the values of records done with
	c = c[:0]
	slotPool.Put(&c)
}

// getSlotChunk returns an empty slot chunk with room for n slots at least.
func getSlotChunk(n int) []any {
	if p, ok := slotPool.Get().(*[]any); ok && cap(*p) >= n {
		return *p
	}
	return make([]any, 0, max(slotChunk, n))
}

// DecodeValue decodes the JSON value that text starts with as rec's value,
// for a decode stage that finds values inside larger documents (a replay
// line's "value" member): rec.Value becomes the value's text, and its fields
// go where Extract would put them, in the same pass that finds the value's
// end. For a stream (rec.Stream) whose expressions read only some fields,
// those go into slots (from the Slab in use, if any) or else into a map of
// them; for a record of no known stream yet (rec.Stream -1), every field
// goes into Fields. A value that is not an object sets rec.Err. It returns
// how many bytes of text the value took, and the error when text does not
// start with a JSON value. Decoding again replaces what an earlier call set.
// A field longer than the stream's max_field_bytes refuses the record as
// Extract's decoding does (rec.Err says which), and the value is skipped
// whole (docs/design.md "Rule safety").
func (x *Extractor) DecodeValue(rec *Record, text string) (int, error) {
	rec.Fields, rec.slots, rec.Err = nil, nil, nil
	var st *rules.Stream
	if rec.Stream >= 0 && rec.Stream < len(x.rs.Streams) {
		st = x.rs.Streams[rec.Stream]
	}
	var (
		v   any
		n   int
		obj bool
		err error
	)
	switch {
	case st == nil:
		v, n, err = jsonv.DecodePrefixOnly(text, nil)
	case st.DecodeFields != nil && x.slotted(rec.Stream):
		slots := x.newSlots(len(st.DecodeFields))
		if v, n, obj, err = jsonv.DecodePrefixSlotsBounded(text, st.DecodeFields, slots, st.MaxFieldBytes); obj {
			rec.slots = slots
		}
	default:
		v, n, err = jsonv.DecodePrefixOnlyBounded(text, st.DecodeFields, st.BoundedFields, st.MaxFieldBytes)
	}
	if tl := (*jsonv.MemberTooLongError)(nil); errors.As(err, &tl) {
		// The value is JSON with a field longer than the stream allows:
		// the record is refused as the task refuses one it decodes
		// (decodeError), and the line goes on past the value.
		if n, err = jsonv.Skip(text); err == nil {
			rec.Value, rec.slots, rec.Err = text[:n], nil, decodeError(st, tl)
		}
		return n, err
	}
	rec.Value = text[:n]
	if err == nil && rec.slots == nil {
		rec.Fields, rec.Err = objectOf(v)
	}
	return n, err
}

// Extract fills rec's Fields (or slots), Key, Time and ID, or sets rec.Err
// to the reason the record goes to the DLQ.
func (x *Extractor) Extract(rec *Record) {
	rec.extracted = true
	if rec.Err != nil {
		return
	}
	if rec.Stream < 0 || rec.Stream >= len(x.rs.Streams) {
		rec.Err = fmt.Errorf("unknown stream %q", rec.StreamName)
		return
	}
	st := x.rs.Streams[rec.Stream]
	if rec.Fields == nil && rec.slots == nil {
		if x.slotted(rec.Stream) {
			if rec.slots, rec.Err = decodeSlots(rec.Value, st, x.newSlots(len(st.DecodeFields))); rec.Err != nil {
				return
			}
		} else if rec.Fields, rec.Err = decodeObject(rec.Value, st); rec.Err != nil {
			return
		}
	}
	fields := rec.fields(x.rs)
	x.ev.SetRecordTime(rec.Timestamp, rec.HasTimestamp)
	if rec.Key, rec.Err = x.ev.Key(rec.Stream, fields); rec.Err != nil {
		return
	}
	rec.keyHash = keyHash(rec.Key)
	if rec.Time, rec.Err = x.ev.Time(rec.Stream, fields); rec.Err != nil {
		return
	}
	if st.HasID {
		if rec.ID, rec.HasID, rec.Err = x.ev.ID(rec.Stream, fields); rec.Err != nil {
			return
		}
	}
	x.project(rec)
}

// project prepares what history keeps of the record: its row (encoded, as
// historyValue encodes it) and marks. It runs again when an enrichment has
// added fields. A value the checkpoint codec cannot write sets rec.Err:
// history could not keep it across a restore.
func (x *Extractor) project(rec *Record) {
	st := x.rs.Streams[rec.Stream]
	if st.Retention == 0 {
		return
	}
	if cap(x.rows)-len(x.rows) < rowRoom {
		x.rows = make([]byte, 0, rowChunk)
	}
	free := x.rows[len(x.rows):]
	e := codec.NewEncoder(free)
	if rec.slots != nil {
		rec.Err = appendHistorySlots(e, st.HistoryFields, x.histAt[rec.Stream], rec.slots)
	} else {
		rec.Err = appendHistoryValue(e, rec.Fields, st.HistoryFields)
	}
	row := e.Bytes()
	rec.row = row[:len(row):len(row)]
	if &row[0] == &free[:1][0] { // in the chunk, not grown out of it
		x.rows = x.rows[:len(x.rows)+len(row)]
	}
	if rec.Err != nil {
		return
	}
	rec.mark, rec.markErrs = x.ev.Mark(rec.Stream, rec.fields(x.rs))
}
