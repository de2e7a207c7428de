package engine

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/internal/prefetch"
	"github.com/vigil-cep/vigil/join"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
	"github.com/vigil-cep/vigil/window"
)

// Record is one input record as the task receives it, from a Kafka partition or
// a replay line.
type Record struct {
	Stream       int    // index of the stream in the ruleset; -1 if the input named none known
	StreamName   string // the stream (or topic) the input named, for DLQ records
	Topic        string // the Kafka topic; when set, DLQ records carry it and echo Value in base64
	Partition    int32
	Offset       int64 // Kafka offset, or replay line number
	Timestamp    int64 // Kafka record timestamp, for streams that take their time from it
	HasTimestamp bool
	Value        string         // JSON text of the value
	Fields       map[string]any // Value decoded, when a decode stage did it already (or slots)
	Raw          string         // what a DLQ record echoes for replay: the whole input line
	Err          error          // the record cannot be processed: it goes to the DLQ with this reason
	Now          bool           // decide on arrival even for a decide: watermark stream (the decision API)
	Quiet        bool           // the decision API's copy of an event it decided: as a duplicate, re-emit nothing

	// Control makes the record an explicit watermark, not an event (a
	// replay's control line): Process raises Watermark as RaiseWatermark
	// does, on Stream and Partition (-1: every stream, every partition of
	// Stream), and counts it nowhere. Process only reads a control record,
	// so one may be handed to several tasks at once. Only Process takes
	// them; Decide and Enricher.Enrich take events.
	Control   bool
	Watermark int64
	// Arrival is the processing time at which the record arrives, for a
	// task built with ArrivalTime (replay, whose driver knows it); other
	// tasks ignore it.
	Arrival int64

	// Set by Extractor.Extract, on the task or ahead of it on a decode stage.
	Key       string
	keyHash   uint64 // of Key, for the key table
	Time      int64
	ID        string
	HasID     bool
	extracted bool
	row       []byte     // what history keeps of the event (historyValue)
	mark      rules.Mark // its element-predicate results
	markErrs  []string   // and the errors of those that failed (Evaluator.Mark)
	// slots hold Value decoded instead of Fields, for a stream with
	// DecodeFields: its fields in that order (rules.Fields).
	slots []any
}

// fields returns the record's decoded fields as expressions read them.
func (rec *Record) fields(rs *rules.Ruleset) rules.Fields {
	if rec.slots != nil {
		return rules.Fields{Slots: rec.slots, Names: rs.Streams[rec.Stream].DecodeFields}
	}
	return rules.MapFields(rec.Fields)
}

// Stats counts what a task did. Every input record is accounted for: it is
// processed, a duplicate, or in the DLQ.
type Stats struct {
	Records         int64 `json:"records"`
	DLQ             int64 `json:"dlq"`
	Duplicates      int64 `json:"duplicates"`
	Decisions       int64 `json:"decisions"`
	WindowResults   int64 `json:"window_results"`
	Late            int64 `json:"late"`
	RuleErrors      int64 `json:"rule_errors"`
	HistoryOverflow int64 `json:"history_overflow"`
	Matches         int64 `json:"matches"`
	Joins           int64 `json:"joins"`
	Timeouts        int64 `json:"timeouts"`
	PartialsDropped int64 `json:"partials_dropped"`
	Lookups         int64 `json:"lookups"`
	LookupFallbacks int64 `json:"lookup_fallbacks"`
	Keys            int   `json:"keys"`
	// ThawErrors counts frozen keys whose record did not decode: their
	// state is lost (Task.ThawError says why).
	ThawErrors int64 `json:"thaw_errors,omitempty"`
	// ColdKeys of the Keys are frozen (Task.Cool), in ColdBytes.
	ColdKeys  int   `json:"cold_keys,omitempty"`
	ColdBytes int   `json:"cold_bytes,omitempty"`
	Watermark int64 `json:"watermark"`
}

// Task runs a ruleset over the records of one task: partition p of every
// input (docs/design.md "Architecture"). It owns its keys' state; it is not
// safe for concurrent use, and needs not be: one goroutine feeds it and
// receives its outputs, which emit gets in processing order.
type Task struct {
	rs    *rules.Ruleset
	ev    *rules.Evaluator
	dec   *Extractor // for records no decode stage extracted
	emit  func(Output)
	clock stream.Clock
	vt    *eventClock // non-nil when processing time is replay's (eventClock)
	wms   *stream.Watermarks
	wm    int64
	// arrival says Process sets vt to each record's Arrival (ArrivalTime).
	arrival bool

	keys keyTable
	// Frozen keys (cold.go): their records, a scratch buffer to encode one,
	// the layout a thaw decodes with, and where Cool goes on from.
	cold       coldKeys
	coldBuf    []byte
	coldLayout *layoutMap
	coolAt     int
	warmLead   int64 // warmLead
	// lastThawError is why the last frozen key that could not thaw did not.
	lastThawError error
	seen          []*seenIDs // per stream; nil for streams without ids
	ids           *IDIndex   // shared with the process's other tasks (SharedIDs); nil: none
	part          int32      // the task's partition, in ids
	windows       []*window.Operator
	fire          []func(window.Result) // per window, built once
	args          [][]any               // per window, scratch
	patterns      []*patternOp
	matchFn       []func(cep.Match)   // per pattern, built once
	timeoutFn     []func(cep.Timeout) // per pattern, built once
	patKey        string              // the key whose NFA is running
	joins         []*joinOp
	joinKey       string    // the key whose join is probing
	seq           uint64    // arrival order of pattern events
	cur           *keyState // the key whose event is being decided, for history()
	curTime       int64
	// guard, when set, sees the rule evaluations (guard.go); onStopped hears
	// of a rule it stopped, which the task then skips (quarantined).
	guard       *rules.Guard
	onStopped   func(rule string)
	quarantined map[int]bool
	lastSweep   int64
	idle        sweepQueue
	maxRetain   int64 // the longest stream retention: when a key's every event has expired

	buf          []byte
	pastScratch  []rules.Past // a restore's, for each history (history.restore)
	hits         []hit
	stats        Stats
	recall       map[recallKey][]byte      // decisions emitted before a restore (Recall)
	info         DecisionInfo              // scratch for Output.Decision
	explain      map[string]map[string]any // rule -> feature -> value, while Decide runs
	due          pendingHeap               // decide: watermark events waiting for the watermark
	index        int                       // the index in Process's batch of the record being processed; -1 outside it
	snapshotSize int                       // the last Snapshot's size, to size the next one's buffer
	needBase     bool                      // the state restored cannot take deltas (NeedsBase)
	layoutBytes  []byte                    // the snapshot's layout section (layout)
	decided      *Decided                  // while Decide runs: where the decision of its record goes (decide.go)
	deciding     string                    // the id Decide decides
	sliced       bool                      // advances fire windows in slices (firing.go)
	fireInline   int                       // with sliced: how many an advance fires at once (fireInline)
	overdue      bool                      // windows are due that have not fired yet (firing.go)
	thawLater    []string                  // frozen keys whose windows or sweep are overdue (thawDue), for Drain

	// Incremental checkpoints (cut.go): while tracked, the keys changed
	// since the last cut, the changes to the ids since, and the cut whose
	// records are being encoded. A key whose keyState.stamp is epoch was
	// touched since the last cut already.
	track   bool
	epoch   uint32
	dirty   map[string]struct{}
	journal idJournal
	cut     *Cut
}

// keyState is what a task keeps per key. The key string is a copy owned
// here, so that input buffers are not pinned by map keys.
//
// What an event reads and writes comes first, and in the state itself: the
// sweep queue's fields, the histories of the first keyStreams streams, the
// handles on the first windows' and patterns' state; further streams,
// windows and patterns, rare, have arrays of their own behind one pointer
// (hist, win, pat find them), nil for most keys. An event then reads
// adjacent memory of its key, with no slice header to load first (about 1%
// of a replay), and a key takes 176 bytes (a history is a 24-byte header)
// rather than the 352 that three slice headers of its own and two-slice
// histories made it.
type keyState struct {
	lastTime int64                    // set through sweepQueue.touch
	bucket   int64                    // the sweep queue bucket that lists it, when listed
	stamp    uint32                   // the Task.epoch in which it was last touched (cut.go)
	slot     int32                    // its index in its bucket's list, plus one; 0 when in none
	own      [keyStreams]history      // per stream, the first ones; empty for streams that keep none
	ownWins  [keyWindows]window.Key   // per window, the first ones: the key's state there
	ownPats  [keyPatterns]*patternKey // per pattern, the first ones: a handle on the key's state there (patternOp.handle)
	key      string
	more     *keyMore // nil unless the ruleset has more streams, windows or patterns than the above hold
}

// keyMore holds a key's state in the streams, windows and patterns after
// those its keyState holds itself.
type keyMore struct {
	hists []history     // the histories of the streams after keyStreams
	wins  []window.Key  // the windows after keyWindows; nil until used
	pats  []*patternKey // the patterns after keyPatterns; nil until used
}

// hist returns the key's history of stream s.
func (ks *keyState) hist(s int) *history {
	if s < keyStreams {
		return &ks.own[s]
	}
	return &ks.more.hists[s-keyStreams] // made with the key (newKeyState)
}

// win returns the key's handle on window w's state, of n windows.
func (ks *keyState) win(w, n int) *window.Key {
	if w < keyWindows {
		return &ks.ownWins[w]
	}
	if ks.more == nil {
		ks.more = new(keyMore)
	}
	if ks.more.wins == nil {
		ks.more.wins = make([]window.Key, n-keyWindows)
	}
	return &ks.more.wins[w-keyWindows]
}

// pat returns the key's handle on pattern p's state, of n patterns.
func (ks *keyState) pat(p, n int) **patternKey {
	if p < keyPatterns {
		return &ks.ownPats[p]
	}
	if ks.more == nil {
		ks.more = new(keyMore)
	}
	if ks.more.pats == nil {
		ks.more.pats = make([]*patternKey, n-keyPatterns)
	}
	return &ks.more.pats[p-keyPatterns]
}

// Option configures a Task.
type Option interface{ apply(*Task) }

type optionFunc func(*Task)

func (f optionFunc) apply(t *Task) { f(t) }

// ProcessingClock makes the task measure idleness and future skew on c (the
// wall clock in a live service). By default processing time is replay's: an
// event's skew is measured against its own record's timestamp
// (processingTime), and idleness against the records' arrival with
// ArrivalTime, not at all without it.
func ProcessingClock(c stream.Clock) Option {
	return optionFunc(func(t *Task) { t.clock, t.vt, t.arrival = c, nil, false })
}

// ArrivalTime makes the task's processing time, which measures idleness,
// the time its records arrive at, as a replay driver knows it: start from
// the task's creation (a driver's tasks start with it, and their inputs are
// active from then), then the Arrival of each record (control records too)
// as Process reaches it. A driver that processes records in its own order
// (replay runs tasks in parallel, each at its own pace) thereby gives each
// task the processing time of its input's place, not of the wall clock.
func ArrivalTime(start int64) Option {
	return optionFunc(func(t *Task) {
		if t.vt == nil {
			t.vt = &eventClock{}
		}
		t.clock, t.vt.now, t.arrival = t.vt, start, true
	})
}

// eventClock is processing time for replay: none (MinTime), or the
// records' Arrival (ArrivalTime).
type eventClock struct{ now int64 }

func (c *eventClock) Now() int64 { return c.now }

// NewTask builds a task for rs; emit receives every output.
func NewTask(rs *rules.Ruleset, emit func(Output), opts ...Option) (*Task, error) {
	vt := &eventClock{now: stream.MinTime}
	t := &Task{rs: rs, emit: emit, clock: vt, vt: vt, wm: stream.MinTime, index: -1, warmLead: warmLead}
	for _, o := range opts {
		o.apply(t)
	}
	ev, err := rs.NewEvaluator((*currentHistory)(t))
	if err != nil {
		return nil, err
	}
	if t.guard != nil {
		ev.SetGuard(t.guard)
	}
	t.ev = ev
	if t.dec, err = NewExtractor(rs); err != nil {
		return nil, err
	}
	t.wms = stream.NewWatermarks(t.clock)
	t.lastSweep = stream.MinTime
	t.seen = make([]*seenIDs, len(rs.Streams))
	for i, st := range rs.Streams {
		t.maxRetain = max(t.maxRetain, st.Retention)
		if st.HasID {
			t.seen[i] = &seenIDs{stream: i}
		}
	}
	t.shareIDs()
	for i, w := range rs.Windows {
		op, err := window.New(w.Spec, w.Aggs)
		if err != nil {
			return nil, fmt.Errorf("window %s: %w", w.Name, err)
		}
		t.windows = append(t.windows, op)
		t.args = append(t.args, make([]any, len(w.Aggs)))
		t.fire = append(t.fire, func(r window.Result) { t.emitWindow(i, r) })
	}
	for i, j := range rs.Joins {
		op, err := join.New(j.Spec, nil)
		if err != nil {
			return nil, fmt.Errorf("join %s: %w", j.Name, err)
		}
		t.joins = append(t.joins, &joinOp{j: j, op: op, emit: func(p join.Pair) { t.onPair(i, p) }})
	}
	for i, p := range rs.Patterns {
		t.patterns = append(t.patterns, &patternOp{p: p, nfa: ev.NFA(i), keys: make(map[string]*patternKey)})
		t.matchFn = append(t.matchFn, func(m cep.Match) { t.onMatch(i, m) })
		t.timeoutFn = append(t.timeoutFn, func(to cep.Timeout) { t.onTimeout(i, to) })
	}
	return t, nil
}

// Stats returns the task's counters.
func (t *Task) Stats() Stats {
	s := t.stats
	n, _ := t.ev.ConditionErrors()
	s.RuleErrors += n
	for _, op := range t.patterns {
		s.PartialsDropped += op.dropped + op.coldDropped
		for _, pk := range op.keys {
			s.PartialsDropped += pk.state.Dropped()
		}
	}
	s.Keys = t.keys.len() + t.cold.len()
	s.ColdKeys, s.ColdBytes = t.cold.len(), t.cold.bytes()
	s.Watermark = t.wm
	return s
}

// Watermark returns the task watermark.
func (t *Task) Watermark() int64 { return t.wm }

// Process handles input records in order. For each: extract it (unless a
// decode stage did), deduplicate, keep history, update windows, feed joins
// and patterns, decide, then move the watermark. A record that cannot be read
// goes to the DLQ with the reason; processing goes on. A control record
// raises the watermark instead (Record.Control). Outputs carry the index in
// recs of the record that caused them (Output.Index).
//
// All records are extracted first, then each is processed while the state
// of the next few is being loaded (lookahead): on a large key set their cache
// misses overlap instead of stalling one after the other.
func (t *Task) Process(recs []*Record) {
	for _, rec := range recs {
		if !rec.extracted && !rec.Control {
			t.dec.Extract(rec)
		}
	}
	// A control record is never extracted: the lookahead skips it.
	at := func(k int) *Record { return recs[k] }
	for i, rec := range recs {
		t.lookahead(at, len(recs), i)
		t.index = i
		if t.arrival {
			t.vt.now = rec.Arrival
		}
		if rec.Control {
			t.RaiseWatermark(rec.Stream, rec.Partition, rec.Watermark)
		} else {
			t.process(rec)
		}
	}
	t.index = -1
}

// processingTime returns the processing time that max_future_skew holds
// rec's event time to, and whether there is one (docs/design.md "Event time"):
// the task's clock in the service; in replay, the record's own timestamp,
// about when the service would have read it, and none for a line without
// one (a gap in the data is not a clock fault).
func (t *Task) processingTime(rec *Record) (int64, bool) {
	if t.vt == nil {
		now := t.clock.Now()
		return now, now != stream.MinTime
	}
	return rec.Timestamp, rec.HasTimestamp
}

// process handles one record (Process).
func (t *Task) process(rec *Record) {
	t.stats.Records++
	if !rec.extracted {
		t.dec.Extract(rec)
	}
	if rec.Err != nil {
		t.dlq(rec, rec.Err.Error())
		return
	}
	st := t.rs.Streams[rec.Stream]
	ts := rec.Time
	if st.MaxFutureSkew > 0 {
		if now, ok := t.processingTime(rec); ok && ts > stream.AddSat(now, st.MaxFutureSkew) {
			t.dlq(rec, fmt.Sprintf("event time %s is more than max_future_skew %s ahead of processing time %s",
				fmtTime(ts), time.Duration(st.MaxFutureSkew)*time.Millisecond, fmtTime(now)))
			return
		}
	}
	in := t.wms.Input(stream.InputID{Stream: rec.Stream, Partition: rec.Partition}, st.Watermark)

	if rec.HasID {
		ids := t.seen[rec.Stream]
		if s, ok := ids.get(rec.ID); ok {
			if s.key != rec.Key {
				// Another transaction under the same id: see IDConflictError.
				t.refuse(rec, &IDConflictError{ID: rec.ID, Key: rec.Key, HeldBy: s.key})
				return
			}
			t.stats.Duplicates++
			switch {
			case s.pending != nil:
				s.pending.repeats++ // its decision is emitted once more when made
			case st.Decide != rules.DecideNever && !rec.Quiet:
				t.reemit(st, rec.ID, s)
			}
			t.observe(in, ts)
			return
		}
		if ids.shared != nil {
			// Another task's id: see IDConflictError.
			if part, ok := ids.shared.claim(idKeyOf(rec.ID), ids.part, ids.owner); !ok {
				t.refuse(rec, &IDConflictError{ID: rec.ID, Key: rec.Key, Partition: part})
				return
			}
		}
	}

	ks := t.keyState(rec.Key, rec.keyHash)
	t.idle.touch(ks, ts)
	t.keep(ks, st, ts, rec.row, rec.mark, rec.markErrs)
	fields := rec.fields(t.rs)
	for _, w := range st.Windows {
		t.addToWindow(w, ks, ts, fields, rec)
	}
	if len(st.Patterns) > 0 || len(st.Joins) > 0 {
		ev := &stream.Event{Stream: rec.Stream, Partition: rec.Partition, Offset: rec.Offset, Key: ks.key, Time: ts,
			ID: rec.ID, Value: fields.AsMap(), Raw: rec.Value}
		t.feedOperators(st, ks, ev)
	}
	var stored []byte
	var pending *pendingDecision
	switch {
	case st.Decide == rules.DecideNever:
	case st.Decide == rules.DecideWatermark && ts > t.wm && !rec.Now:
		// Decided once the watermark passes ts (decideDue): the state it
		// reads is then all of the input up to ts, whatever the arrival order.
		// Its id is set below, as the id table keeps it.
		pending = t.deferDecision(st, "", ks.key, ts, fields.AsMap())
	default:
		if b, ok := t.recalled(st, rec.ID, rec.HasID); ok {
			t.stats.Decisions++
			t.out(Output{Kind: KindDecision, Key: rec.ID, Value: b})
			stored = b
		} else {
			stored = t.decide(st, rec.ID, ks, ts, fields)
		}
	}
	if rec.HasID {
		ids := t.seen[rec.Stream]
		id := ids.put(rec.ID, seen{key: ks.key, time: ts, decision: stored, pending: pending, crc: BodyCRC(rec.Value)})
		if pending != nil {
			pending.id = id
		}
		if len(t.explain) > 0 { // the decision API's event: keep its features with its decision
			if ids.features == nil {
				ids.features = make(map[string][]byte)
			}
			ids.features[id] = jsonv.Append(nil, t.explain)
		}
		t.logID(rec.Stream, id)
	}
	t.observe(in, ts)
}

// refuse sends an event that cannot be processed to the DLQ with err as its
// reason, which rec.Err then holds (for the caller of Process: the decision
// API).
func (t *Task) refuse(rec *Record, err error) {
	rec.Err = err
	t.dlq(rec, err.Error())
}

// keep adds an event to its key's history of st, when st keeps one.
func (t *Task) keep(ks *keyState, st *rules.Stream, ts int64, row []byte, mark rules.Mark, errs []string) {
	if st.Retention == 0 {
		return
	}
	h := ks.hist(st.Index)
	h.add(ts, row, mark, errs)
	t.stats.HistoryOverflow += int64(h.evict(horizon(t.wm, st.Retention), st.MaxHistory))
}

// decodeObject decodes an event's value into a map, keeping only the fields
// named in only when it is not nil (Stream.DecodeFields).
func decodeObject(text string, st *rules.Stream) (map[string]any, error) {
	v, err := jsonv.DecodeOnlyBounded(text, st.DecodeFields, st.BoundedFields, st.MaxFieldBytes)
	if err != nil {
		return nil, decodeError(st, err)
	}
	return objectOf(v)
}

// decodeError says why an event's value was refused: not JSON, or a field
// that an expression reads longer than the stream allows (the cost bound
// assumes it, docs/design.md "Rule safety").
func decodeError(st *rules.Stream, err error) error {
	if tl := (*jsonv.MemberTooLongError)(nil); errors.As(err, &tl) {
		return fmt.Errorf("field %q is %d bytes, more than max_field_bytes (%d) of stream %s", tl.Key, tl.Bytes, tl.Limit, st.Name)
	}
	return fmt.Errorf("value is not JSON: %w", err)
}

// decodeSlots is decodeObject for a stream decoded into slots: the fields
// named go into slots, which it returns.
func decodeSlots(text string, st *rules.Stream, slots []any) ([]any, error) {
	v, obj, err := jsonv.DecodeSlotsBounded(text, st.DecodeFields, slots, st.MaxFieldBytes)
	switch {
	case err != nil:
		return nil, decodeError(st, err)
	case !obj:
		_, err = objectOf(v)
		return nil, err
	}
	return slots, nil
}

// objectOf returns a decoded value that must be an object.
func objectOf(v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("value must be a JSON object, not %s", jsonKind(v))
	}
	return m, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// horizon is the oldest event time still kept under retention at watermark wm.
func horizon(wm, retention int64) int64 {
	if wm == stream.MinTime {
		return stream.MinTime
	}
	return stream.AddSat(wm, -retention)
}

// keyStreams is how many streams' histories a keyState holds in itself:
// reaching a key's history then reads the keyState's own memory, not one
// more array (a cache miss per event on a large key set).
const keyStreams = 4

// keyWindows and keyPatterns are, likewise, how many windows' and patterns'
// handles a keyState holds in itself.
const (
	keyWindows  = 2
	keyPatterns = 2
)

// keyState returns key's state, made if the key has none, for a change: a
// tracked task records the key as changed (touch) on its first change since
// the last cut.
func (t *Task) keyState(key string, h uint64) *keyState {
	ks := t.keys.get(key, h)
	// owing first: keyState runs for every event, and owedSweep is a call.
	if ks != nil && t.idle.owing() && t.owedSweep(ks) {
		ks = nil
	}
	if ks != nil && ks.stamp == t.epoch {
		return ks
	}
	if ks == nil && t.cold.len() > 0 {
		if i := t.cold.find(key, h); i >= 0 {
			t.thaw(i)
			ks = t.keys.get(key, h)
		}
	}
	if ks == nil {
		// touch first: a pending cut may still have to encode the key's
		// state elsewhere (its windows, its pattern) as it was without
		// this. The changed set and the new state share one copy of key.
		owned := strings.Clone(key)
		t.touch(owned)
		ks = t.newKeyState(owned, h)
	} else {
		t.touch(ks.key)
	}
	ks.stamp = t.epoch
	return ks
}

// ownKeyState is keyState for a restore, which tracks no change, and whose
// key the state may keep as it is: every operator's state of the key
// shares the one string.
func (t *Task) ownKeyState(key string, h uint64) *keyState {
	ks := t.keys.get(key, h)
	if ks == nil {
		ks = t.newKeyState(key, h)
	}
	ks.stamp = t.epoch
	return ks
}

// newKeyState adds a state for key, not in the table yet, which keeps key.
func (t *Task) newKeyState(key string, h uint64) *keyState {
	ks := &keyState{key: key, lastTime: stream.MinTime}
	if n := len(t.rs.Streams); n > keyStreams {
		ks.more = &keyMore{hists: make([]history, n-keyStreams)}
	}
	t.keys.insert(ks, h)
	return ks
}

func (t *Task) addToWindow(w int, ks *keyState, ts int64, fields rules.Fields, rec *Record) {
	args := t.args[w]
	keep, err := t.ev.WindowArgs(w, fields, args)
	if err != nil {
		t.stats.RuleErrors++
		t.dlq(rec, err.Error())
		return
	}
	if !keep {
		return
	}
	if !t.windows[w].AddKey(ks.win(w, len(t.windows)), ks.key, ts, args, t.wm, t.fire[w]) {
		t.emitLate("window", t.rs.Windows[w].Name, t.rs.Windows[w].Stream, ks.key, ts, rec.Value)
	}
	clear(args)
}

// currentHistory serves history() for the event being decided: the
// history of its key (t.cur) up to its time.
type currentHistory Task

func (c *currentHistory) Past(stream int, window int64) []rules.Past {
	if c.cur == nil {
		return nil
	}
	return c.cur.hist(stream).between(horizon(c.curTime, window), c.curTime)
}

func (c *currentHistory) Values(stream int, window int64) []any {
	if c.cur == nil {
		return nil
	}
	h := c.cur.hist(stream)
	lo, hi := h.span(horizon(c.curTime, window), c.curTime)
	return h.values(lo, hi, c.rs.Streams[stream].HistoryFields)
}

func (c *currentHistory) Failure(stream int, window int64, i, k int) string {
	h := c.cur.hist(stream)
	lo, _ := h.span(horizon(c.curTime, window), c.curTime)
	return h.failure(lo+i, k)
}

// observe records the event time on its input and moves the watermark.
func (t *Task) observe(in *stream.Input, ts int64) {
	t.wms.Observe(in, ts)
	t.advance(t.wms.Current())
}

// RaiseWatermark applies an explicit watermark: to one input (stream and
// partition), to every partition of a stream (partition < 0), or to every
// input, including later ones (stream < 0).
func (t *Task) RaiseWatermark(streamIdx int, partition int32, wm int64) {
	switch {
	case streamIdx < 0:
		t.wms.RaiseAll(wm)
	case partition < 0:
		t.wms.RaiseStream(streamIdx, wm)
	default:
		st := t.rs.Streams[streamIdx]
		t.wms.Raise(t.wms.Input(stream.InputID{Stream: streamIdx, Partition: partition}, st.Watermark), wm)
	}
	t.advance(t.wms.Current())
}

// ExpectInput registers an input (a stream's partition) before its first
// record, so that it holds the task watermark back from now until it
// delivers or goes idle. A Kafka task knows its inputs — partition p of every
// input topic — and registers them all: otherwise an input whose records
// come later would not count, and decide: watermark could decide a
// transaction before that input's earlier events arrive.
func (t *Task) ExpectInput(streamIdx int, partition int32) {
	t.wms.Input(stream.InputID{Stream: streamIdx, Partition: partition}, t.rs.Streams[streamIdx].Watermark)
}

// MaxDLQRawBytes is how much of a Kafka record's value a DLQ record keeps
// (base64): enough to find its producer, small enough for any broker.
const MaxDLQRawBytes = 64 << 10

// Tick moves the watermark as processing time passes with no input: an
// input that has gone idle stops holding the task watermark back.
func (t *Task) Tick() { t.advance(t.wms.Current()) }

// Finish ends a bounded input: the watermark jumps to its maximum, so every
// window fires and all state is flushed.
func (t *Task) Finish() { t.advance(t.wms.Finish()) }

func (t *Task) advance(wm int64) {
	if wm <= t.wm {
		return
	}
	if wm == stream.MaxTime {
		t.drain(nil) // the end of the input: a backlog first, all at once
	}
	t.thawDue(wm)         // before any operator acts on a key on its own
	t.advancePatterns(wm) // before t.wm moves: see advancePatterns
	t.wm = wm
	for _, jo := range t.joins {
		jo.op.Advance(wm)
	}
	t.fireWindows(wm)
	t.decideDue(wm)
	for i, s := range t.seen {
		if s != nil {
			s.expire(horizon(wm, t.rs.Streams[i].IDRetention))
		}
	}
	if wm != stream.MaxTime && (t.lastSweep == stream.MinTime || wm-t.lastSweep >= sweepEvery) {
		t.lastSweep = wm
		t.sweep()
	}
}

// sweep forgets the keys whose every event has expired (their last event
// time is older than the longest retention), so that memory follows the
// live keys, not every key ever seen. It visits only those keys (sweepQueue);
// expired events of live keys go when their key next adds to its history.
//
// After a watermark jump the keys to forget may be most of the task's: a
// task firing in slices forgets fireInline of them in the advance and
// leaves the rest to Drain, as it does with windows (firing.go), and a key
// owed to the sweep is forgotten before it is next used (owedSweep).
func (t *Task) sweep() {
	h := horizon(t.wm, t.maxRetain)
	if !t.sliced {
		t.idle.due(h, t.forgetExpired)
		return
	}
	t.idle.owe(h)
	if !t.idle.forget(t.forgetExpired, t.inlineMore()) {
		t.overdue = true
	}
}

// forgetExpired is the sweep's work on one key, every event of which has
// expired.
func (t *Task) forgetExpired(ks *keyState) {
	t.touch(ks.key)
	for i, st := range t.rs.Streams {
		if st.Retention > 0 {
			t.stats.HistoryOverflow += int64(ks.hist(i).evict(horizon(t.wm, st.Retention), st.MaxHistory))
		}
	}
	t.keys.delete(ks)
}

// owedSweep reports whether ks is a key the sweep in slices has yet to
// forget, and forgets it then: a reader or writer of a key's state calls it
// first, so that the key is as the sweep at once would have left it.
func (t *Task) owedSweep(ks *keyState) bool {
	if !t.idle.owes(ks) {
		return false
	}
	t.sweepNow(ks)
	return true
}

// sweepNow forgets ks, listed in the sweep queue, out of its turn there.
func (t *Task) sweepNow(ks *keyState) {
	t.idle.unlist(ks)
	t.forgetExpired(ks)
}

func (t *Task) dlq(rec *Record, msg string) {
	t.stats.DLQ++
	b := appendKind(t.buf[:0], KindDLQ)
	b = appendStr(b, "stream", rec.StreamName)
	if rec.Topic != "" {
		b = appendStr(b, "topic", rec.Topic)
	}
	b = appendInt(b, "partition", int64(rec.Partition))
	b = appendInt(b, "offset", rec.Offset)
	b = appendStr(b, "error", msg)
	if rec.Topic != "" {
		// Kafka values are bytes, not necessarily UTF-8 text. A huge one is
		// cut so that its DLQ record stays under the broker's message size.
		raw := rec.Value
		if len(raw) > MaxDLQRawBytes {
			raw = raw[:MaxDLQRawBytes]
			b = appendInt(b, "raw_bytes", int64(len(rec.Value)))
		}
		b = appendStr(b, "raw", base64.StdEncoding.EncodeToString([]byte(raw)))
	} else {
		b = appendStr(b, "raw", rec.Raw)
	}
	t.buf = append(b, '}')
	t.out(Output{Kind: KindDLQ, Value: t.buf, Stream: rec.StreamName, Reason: msg})
}

// emitLate writes a late record: the event came at or below the watermark of
// the operator named by kind ("window", "pattern", "join") and name.
func (t *Task) emitLate(kind, name string, stream int, key string, ts int64, raw string) {
	t.stats.Late++
	b := appendKind(t.buf[:0], KindLate)
	b = appendStr(b, kind, name)
	b = appendStr(b, "stream", t.rs.Streams[stream].Name)
	b = appendStr(b, "key", key)
	b = appendInt(b, "time", ts)
	b = appendRaw(b, "value", raw)
	t.buf = append(b, '}')
	t.out(Output{Kind: KindLate, Key: key, Value: t.buf})
}

func (t *Task) emitWindow(w int, r window.Result) {
	t.stats.WindowResults++
	win := t.rs.Windows[w]
	b := appendKind(t.buf[:0], KindWindow)
	b = appendStr(b, "window", win.Name)
	b = appendStr(b, "key", r.Key)
	b = appendInt(b, "start", r.Start)
	b = appendInt(b, "end", r.End)
	b = append(appendField(b, "values"), '{')
	for i, a := range win.Aggs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonv.AppendString(b, a.Name)
		b = jsonv.Append(append(b, ':'), r.Values[i])
	}
	b = append(b, '}')
	b = strconv.AppendBool(appendField(b, "update"), r.Update)
	t.buf = append(b, '}')
	t.out(Output{Kind: KindWindow, Key: r.Key, Value: t.buf})
}

// Lookahead: a task's loop starts loading the state of the records a few
// places ahead of the one it processes, in steps, so that their cache misses
// overlap with the work on the records before them instead of stalling it
// one after the other (keyTable). Each step reads only what the step before
// it has started to load.
const (
	aheadItem  = 12 // the record
	aheadSlots = 8  // the key's slot in the key table, the id's in the ids table
	aheadState = 4  // the key's state, from the slot
	aheadParts = 2  // its history, window and pattern state, from the state
)

// lookahead starts loading what processing the k-th of n records will read,
// for k a few places after i, in the stages above: at(k) is the k-th. at
// must not read the record (that would stall on it); records not extracted
// are skipped.
func (t *Task) lookahead(at func(int) *Record, n, i int) {
	if k := i + aheadItem; k < n {
		prefetch.Range(unsafe.Pointer(at(k)), unsafe.Sizeof(Record{}))
	}
	if k := i + aheadSlots; k < n {
		if rec := lookable(at(k)); rec != nil {
			t.keys.prefetchSlot(rec.keyHash)
			if len(rec.slots) > 0 {
				prefetch.Range(unsafe.Pointer(&rec.slots[0]), uintptr(len(rec.slots))*unsafe.Sizeof(rec.slots[0]))
			}
			if rec.HasID {
				t.seen[rec.Stream].prefetchSlot(rec.ID)
			}
		}
	}
	if k := i + aheadState; k < n {
		if rec := lookable(at(k)); rec != nil {
			if ks := t.keys.guess(rec.keyHash); ks != nil {
				prefetch.Range(unsafe.Pointer(ks), unsafe.Sizeof(*ks))
			}
		}
	}
	if k := i + aheadParts; k < n {
		if rec := lookable(at(k)); rec != nil {
			if ks := t.keys.guess(rec.keyHash); ks != nil {
				t.prefetchParts(ks, t.rs.Streams[rec.Stream])
				prefetch.Line(unsafe.Pointer(unsafe.StringData(ks.key)))
			}
		}
	}
}

// lookable returns rec when the lookahead can look its state up: it has
// been extracted, with no error.
func lookable(rec *Record) *Record {
	if rec.extracted && rec.Err == nil {
		return rec
	}
	return nil
}

// prefetchParts starts loading what an event of st reads of ks's state.
func (t *Task) prefetchParts(ks *keyState, st *rules.Stream) {
	if st.Retention > 0 && st.Index < keyStreams {
		ks.own[st.Index].prefetch()
	}
	for _, w := range st.Windows {
		if w < keyWindows {
			ks.ownWins[w].Prefetch()
		}
	}
	for _, p := range st.Patterns {
		if p < keyPatterns && ks.ownPats[p] != nil {
			prefetch.Line(unsafe.Pointer(ks.ownPats[p]))
		}
	}
}
