package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vigil-cep/vigil/service"
)

// Decided is the answer to Decide: the decision of one event, and what the
// rules it matched read.
type Decided struct {
	// Output is the decision record. The task has not emitted it: the
	// caller writes it, with the event (docs/design.md "Decision API").
	// Its Value and Key are the caller's to keep; Decision is nil for a
	// replay.
	Output Output
	// Features holds, per matched rule, the values its condition compares
	// (rule -> feature -> value, a JSON object), as the first answer for the
	// id gave them; nil when no rule matched, or when the id was decided
	// from its input rather than through Decide.
	Features []byte
	// Replay says the id was known: Output is its stored decision, and
	// nothing was processed.
	Replay bool
	info   DecisionInfo
}

// keep takes the decision of the record Decide runs, in place of emitting
// it.
func (d *Decided) keep(o Output) {
	o.Key, o.Value, o.Index = strings.Clone(o.Key), append([]byte(nil), o.Value...), -1
	if o.Decision != nil {
		d.info = DecisionInfo{Action: o.Decision.Action, Hits: append([]RuleHit(nil), o.Decision.Hits...)}
		o.Decision = &d.info
	}
	d.Output = o
}

// Decide processes one event of a stream with decisions at once (the
// decision API, docs/design.md "Decision API"): it counts in its key's state
// as any event does, and its decision is made on arrival even for a decide:
// watermark stream. The decision is returned with the features its matched
// rules read, not emitted; other outputs the event causes (window results,
// decisions the watermark was holding) are emitted as Process emits them.
//
// A known id returns its stored decision (Replay) without processing the
// event again; the same id with another body, or an id another key or task
// holds, is service.ErrIDConflict. An id whose decision waits for the
// watermark is service.ErrPending. An event that cannot be decided is
// service.ErrBadEvent, with the reason its DLQ record gives.
func (t *Task) Decide(rec *Record) (*Decided, error) {
	if !rec.extracted {
		t.dec.Extract(rec)
	}
	if rec.Err != nil {
		return nil, fmt.Errorf("%w: %w", service.ErrBadEvent, rec.Err)
	}
	if !rec.HasID {
		return nil, fmt.Errorf("%w: it has no id (stream %s)", service.ErrBadEvent, t.rs.Streams[rec.Stream].Name)
	}
	if d, crc, pending, ok := t.lookup(rec.Stream, rec.ID); ok {
		switch {
		case crc != BodyCRC(rec.Value):
			return nil, service.ErrIDConflict
		case pending:
			return nil, service.ErrPending
		}
		if err := t.idConflict(rec.Stream, rec.ID, rec.Key); err != nil {
			return nil, err
		}
		return &Decided{Output: Output{Kind: KindDecision, Key: rec.ID, Value: append([]byte(nil), d...), Index: -1},
			Features: t.features(rec.Stream, rec.ID), Replay: true}, nil
	}
	if err := t.idConflict(rec.Stream, rec.ID, rec.Key); err != nil {
		return nil, err
	}
	rec.Now = true
	d := new(Decided)
	t.decided, t.deciding = d, rec.ID
	t.explain = make(map[string]map[string]any)
	t.process(rec)
	t.decided, t.deciding, t.explain = nil, "", nil
	switch {
	case errors.Is(rec.Err, service.ErrIDConflict):
		return nil, rec.Err // claimed by another task since idConflict above
	case rec.Err != nil:
		return nil, fmt.Errorf("%w: %w", service.ErrBadEvent, rec.Err)
	case d.Output.Value == nil:
		// Refused (the DLQ has its record) by a rule that failed to run.
		return nil, fmt.Errorf("%w: the event produced no decision; its DLQ record says why", service.ErrBadEvent)
	}
	d.Features = t.features(rec.Stream, rec.ID)
	return d, nil
}

// Decision returns the decision the task holds for a transaction id, in any
// stream, with the features Decide recorded for it; ok is false when it
// holds none, or the decision waits for the watermark.
func (t *Task) Decision(id string) (record, features []byte, ok bool) {
	for si := range t.seen {
		if d, _, pending, found := t.lookup(si, id); found && !pending {
			return d, t.features(si, id), true
		}
	}
	return nil, nil, false
}

// features returns what the matched rules of id's decision read when Decide
// made it: rule -> feature -> value, a JSON object. It is nil for an id
// decided otherwise, or whose decision matched no rule, or that is not
// remembered. The bytes are the same for as long as the id is remembered,
// across snapshots, so that a repeated request gets the features of its
// first answer.
func (t *Task) features(streamIdx int, id string) []byte {
	if streamIdx < 0 || streamIdx >= len(t.seen) || t.seen[streamIdx] == nil {
		return nil
	}
	return t.seen[streamIdx].features[id]
}

// out hands an output to the driver, tagged with the index of the record
// being processed; the decision Decide was asked for goes to its caller
// instead.
func (t *Task) out(o Output) {
	if t.decided != nil && o.Kind == KindDecision && o.Key == t.deciding {
		t.decided.keep(o)
		return
	}
	o.Index = t.index
	t.emit(o)
}
