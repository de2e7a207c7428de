package engine

import (
	"fmt"
	"slices"

	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
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
	slab   []any // where newSlots takes slots from
	// chunks, while the Extractor decodes a replay batch, collects the
	// batch's full slot chunks, for the batch to recycle (batch.release).
	chunks *[][]any
}

// NewExtractor returns an Extractor for rs.
func NewExtractor(rs *rules.Ruleset) (*Extractor, error) {
	ev, err := rs.NewEvaluator(func(int, int64) []rules.Past { return nil })
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
// processes it, and not kept. (A replay batch recycles its chunks once
// run: see batch.release.)
func (x *Extractor) newSlots(n int) []any {
	if len(x.slab)+n > cap(x.slab) {
		if x.chunks != nil {
			*x.chunks = append(*x.chunks, x.slab)
			x.slab = getSlotChunk(n)
		} else {
			x.slab = make([]any, 0, max(slotChunk, n))
		}
	}
	s := x.slab[len(x.slab) : len(x.slab)+n : len(x.slab)+n]
	x.slab = x.slab[:len(x.slab)+n]
	for i := range s {
		s[i] = rules.Absent
	}
	return s
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

// project prepares what history keeps of the record: its row and marks. It
// runs again when an enrichment has added fields.
func (x *Extractor) project(rec *Record) {
	st := x.rs.Streams[rec.Stream]
	if st.Retention == 0 {
		return
	}
	if rec.slots != nil {
		rec.row = stream.NewRowFromSlots(st.HistoryFields, x.histAt[rec.Stream], rec.slots, rules.Absent)
	} else {
		rec.row = project(rec.Fields, st.HistoryFields)
	}
	rec.mark = x.ev.Mark(rec.Stream, rec.fields(x.rs))
}

// project reduces an event to what history() readers need: a Row of the
// fields rules read, or the whole field map when some rule reads events whole.
func project(fields map[string]any, keep []string) any {
	if keep == nil {
		return fields
	}
	return stream.NewRow(keep, fields)
}
