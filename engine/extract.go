package engine

import (
	"fmt"

	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// Extractor is the stateless half of processing a record, which a decode
// stage can run ahead of the task on other goroutines (DESIGN §2 "source:
// decode JSON, extract key / event time / id"): decode the value, evaluate the
// stream's key, time and id expressions, and prepare what history keeps of
// the event. Not safe for concurrent use: each goroutine has its own.
type Extractor struct {
	rs      *rules.Ruleset
	ev      *rules.Evaluator
	recycle *fieldsRecycler // maps to decode into; nil: new ones
}

// NewExtractor returns an Extractor for rs.
func NewExtractor(rs *rules.Ruleset) (*Extractor, error) {
	ev, err := rs.NewEvaluator(func(int, int64) []rules.Past { return nil })
	if err != nil {
		return nil, err
	}
	return &Extractor{rs: rs, ev: ev}, nil
}

// Extract fills rec's Fields, Key, Time and ID, or sets rec.Err to the reason
// the record goes to the DLQ.
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
	if rec.Fields == nil {
		if rec.Fields, rec.Err = decodeObject(rec.Value, x.recycle.get(), st.DecodeFields); rec.Err != nil {
			return
		}
	}
	x.ev.SetRecordTime(rec.Timestamp, rec.HasTimestamp)
	if rec.Key, rec.Err = x.ev.Key(rec.Stream, rec.Fields); rec.Err != nil {
		return
	}
	if rec.Time, rec.Err = x.ev.Time(rec.Stream, rec.Fields); rec.Err != nil {
		return
	}
	if st.HasID {
		if rec.ID, rec.HasID, rec.Err = x.ev.ID(rec.Stream, rec.Fields); rec.Err != nil {
			return
		}
	}
	x.project(rec)
}

// project prepares what history keeps of the record: its row and marks. It
// runs again when an enrichment has added fields.
func (x *Extractor) project(rec *Record) {
	if st := x.rs.Streams[rec.Stream]; st.Retention > 0 {
		rec.row = project(rec.Fields, st.HistoryFields)
		rec.mark = x.ev.Mark(rec.Stream, rec.Fields)
	}
}

// project reduces an event to what history() readers need: a Row of the
// fields rules read, or the whole field map when some rule reads events whole.
func project(fields map[string]any, keep []string) any {
	if keep == nil {
		return fields
	}
	return stream.NewRow(keep, fields)
}
