package engine

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// patternOp runs one pattern for every key of a task (docs/design.md "Patterns").
// With event-time ordering it buffers each key's events above the watermark
// and feeds them in time order as the watermark passes; with arrival ordering
// it feeds them at once. Either way, time reaches each key's NFA only through
// events and watermarks, so matches and timeouts replay identically.
type patternOp struct {
	p    *rules.Pattern
	nfa  *cep.NFA
	keys map[string]*patternKey
	due  dueHeap // keys with buffered events or a partial-match deadline, by time
	// dropped counts partial matches the cap dropped on keys since deleted.
	dropped int64
	// coldDropped and coldPartials are dropped and open partial matches of
	// the keys frozen (cold.go), which op.keys does not hold meanwhile.
	coldDropped  int64
	coldPartials int
}

// patternKey is one key's NFA state and its event-time buffer.
type patternKey struct {
	key   string
	state cep.State    // kept here, not behind a pointer: one object per key
	buf   []*cep.Event // event-time ordering: events above the watermark, by (time, seq)
	clock int64        // the NFA's time: never goes back
	due   int64        // the time this key is queued at in due, or MaxTime
	live  bool         // in keys: a handle (keyState.pats) may use it
}

func (op *patternOp) keyState(key string) *patternKey {
	pk, ok := op.keys[key]
	if !ok {
		pk = &patternKey{key: key, clock: stream.MinTime, due: stream.MaxTime, live: true}
		op.nfa.InitState(&pk.state)
		op.keys[key] = pk
	}
	return pk
}

// handle is keyState through a handle the task keeps with the key's own
// state, which saves hashing the key again per event; h is refreshed when
// the state it holds has been deleted.
func (op *patternOp) handle(h **patternKey, key string) *patternKey {
	if pk := *h; pk != nil && pk.live {
		return pk
	}
	*h = op.keyState(key)
	return *h
}

// schedule queues pk at time at, unless it is queued earlier already.
func (op *patternOp) schedule(pk *patternKey, at int64) {
	if at < pk.due {
		pk.due = at
		heap.Push(&op.due, dueEntry{at: at, key: pk})
	}
}

// feedPattern hands one event of the pattern's stream to the key's NFA, or
// buffers it, or reports it late.
func (t *Task) feedPattern(pi int, ks *keyState, ev *stream.Event) {
	op := t.patterns[pi]
	pk := op.handle(ks.pat(pi, len(t.patterns)), ev.Key)
	t.seq++
	cev := &cep.Event{Time: ev.Time, Seq: t.seq, Value: ev}
	if op.p.Ordering == rules.Arrival {
		t.runNFA(pi, pk, cev)
		return
	}
	if ev.Time <= t.wm {
		t.emitLate("pattern", op.p.Name, ev.Stream, ev.Key, ev.Time, ev.Raw)
		return
	}
	i := len(pk.buf)
	for i > 0 && pk.buf[i-1].Time > ev.Time {
		i--
	}
	pk.buf = append(pk.buf, nil)
	copy(pk.buf[i+1:], pk.buf[i:])
	pk.buf[i] = cev
	op.schedule(pk, ev.Time)
}

// runNFA processes one event on the key's NFA at a time that never goes back
// (an arrival-ordered event older than the key's clock runs at the clock).
func (t *Task) runNFA(pi int, pk *patternKey, ev *cep.Event) {
	op := t.patterns[pi]
	if ev.Time < pk.clock {
		clamped := *ev
		clamped.Time = pk.clock
		ev = &clamped
	}
	pk.clock = ev.Time
	saved := t.patKey
	t.patKey = pk.key
	pk.state.Process(ev, t.matchFn[pi], t.timeoutFn[pi])
	t.patKey = saved
	t.afterNFA(op, pk)
}

// afterNFA queues the key for its next partial-match deadline.
func (t *Task) afterNFA(op *patternOp, pk *patternKey) {
	if d := pk.state.NextDeadline(); d != stream.MaxTime {
		op.schedule(pk, d)
	}
}

// advancePatterns runs every pattern up to watermark wm: buffered events at
// or below it are fed in time order, then time moves to wm, which times out
// partial matches and completes trailing negations. It runs before windows
// see wm, so matches (derived events at their end time) reach windows as on
// time, as Flink's CEP operator emits before it forwards the watermark.
//
// The maximum watermark (the end of a bounded input) ends every partial
// match of every key (endPattern), not only those of the keys queued.
func (t *Task) advancePatterns(wm int64) {
	end := wm == stream.MaxTime
	// A match feeds the patterns over its derived stream, which may come
	// earlier in the list: run until nothing at or below wm is left.
	for progress := true; progress; {
		progress = false
		for pi, op := range t.patterns {
			if len(op.due) > 0 && op.due[0].at <= wm {
				progress = true
				t.advancePattern(pi, op, wm)
			}
			if end && t.endPattern(pi, op) {
				progress = true
			}
		}
	}
}

// endPattern ends the input for pattern pi (docs/design.md "Watermarks": at the
// maximum watermark no partial match can continue). Each key whose NFA still
// holds partial matches, or matches a skip strategy held back behind them,
// moves to the maximum time, which ends the former and emits the latter
// (cep.State.Advance). advancePattern did so for the keys it ran; a key
// without Within and without buffered events was not queued, and is found
// here, in key order, so that the outputs replay identically. It reports
// whether it ended any key.
func (t *Task) endPattern(pi int, op *patternOp) bool {
	var open []*patternKey
	for _, pk := range op.keys {
		if !pk.state.Empty() && len(pk.buf) == 0 { // a key with events is queued: advancePattern feeds them first
			open = append(open, pk)
		}
	}
	slices.SortFunc(open, func(a, b *patternKey) int { return strings.Compare(a.key, b.key) })
	for _, pk := range open {
		t.touch(pk.key)
		pk.clock = stream.MaxTime
		saved := t.patKey
		t.patKey = pk.key
		pk.state.Advance(stream.MaxTime, t.matchFn[pi], t.timeoutFn[pi])
		t.patKey = saved
		if pk.due == stream.MaxTime && len(pk.buf) == 0 && pk.state.Empty() {
			op.dropped += pk.state.Dropped()
			pk.live = false
			delete(op.keys, pk.key)
		}
	}
	return len(open) > 0
}

func (t *Task) advancePattern(pi int, op *patternOp, wm int64) {
	{
		for len(op.due) > 0 && op.due[0].at <= wm {
			e := heap.Pop(&op.due).(dueEntry)
			pk := e.key
			if pk.due != e.at {
				continue // a stale entry: the key was queued earlier since
			}
			t.touch(pk.key)
			pk.due = stream.MaxTime
			n := 0
			for n < len(pk.buf) && pk.buf[n].Time <= wm {
				t.runNFA(pi, pk, pk.buf[n])
				n++
			}
			clear(pk.buf[:n])
			pk.buf = append(pk.buf[:0], pk.buf[n:]...)
			if wm > pk.clock {
				pk.clock = wm
				saved := t.patKey
				t.patKey = pk.key
				pk.state.Advance(wm, t.matchFn[pi], t.timeoutFn[pi])
				t.patKey = saved
			}
			if len(pk.buf) > 0 {
				op.schedule(pk, pk.buf[0].Time)
			}
			t.afterNFA(op, pk)
			if len(pk.buf) == 0 && pk.state.Empty() && pk.due == stream.MaxTime {
				op.dropped += pk.state.Dropped()
				pk.live = false
				delete(op.keys, pk.key)
			}
		}
	}
}

// onMatch emits a match record and feeds the match, as an event of the
// pattern's derived stream, to what reads that stream.
func (t *Task) onMatch(pi int, m cep.Match) {
	p, key := t.patterns[pi].p, t.patKey
	t.stats.Matches++
	b := appendKind(t.buf[:0], KindMatch)
	b = appendStr(b, "pattern", p.Name)
	b = appendStr(b, "key", key)
	b = appendInt(b, "start", m.Start)
	b = appendInt(b, "end", m.End)
	b = appendStepEvents(appendField(b, "events"), p, m.Events)
	t.buf = append(b, '}')
	t.out(Output{Kind: KindMatch, Key: key, Value: t.buf})

	fields := p.MatchEvent(key, m.Start, m.End, m.Events)
	ev := &stream.Event{Stream: p.Derived, Key: key, Time: m.End, Value: fields, Raw: string(jsonv.Append(nil, fields))}
	t.processDerived(ev)
}

func (t *Task) onTimeout(pi int, to cep.Timeout) {
	p, key := t.patterns[pi].p, t.patKey
	t.stats.Timeouts++
	if !p.Timeouts {
		return
	}
	b := appendKind(t.buf[:0], KindTimeout)
	b = appendStr(b, "pattern", p.Name)
	b = appendStr(b, "key", key)
	b = appendInt(b, "start", to.Start)
	b = appendStepEvents(appendField(b, "events"), p, to.Events)
	t.buf = append(b, '}')
	t.out(Output{Kind: KindTimeout, Key: key, Value: t.buf})
}

// appendStepEvents writes {"step": [event, ...], ...} in step order, the
// events as they were received.
func appendStepEvents(b []byte, p *rules.Pattern, events [][]*cep.Event) []byte {
	b = append(b, '{')
	n := 0
	for i, name := range p.Steps {
		if len(events[i]) == 0 {
			continue
		}
		if n++; n > 1 {
			b = append(b, ',')
		}
		b = append(jsonv.AppendString(b, name), ':', '[')
		for j, ev := range events[i] {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, ev.Value.(*stream.Event).Raw...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// processDerived runs a derived event (a match, a join pair) through history,
// windows and the joins and patterns over its stream, as an input event would be, without
// idempotency or decisions.
func (t *Task) processDerived(ev *stream.Event) {
	st := t.rs.Streams[ev.Stream]
	ks := t.keyState(ev.Key, keyHash(ev.Key))
	t.idle.touch(ks, ev.Time)
	rec := &Record{Stream: ev.Stream, StreamName: st.Name, Value: ev.Raw, Fields: ev.Value}
	if st.Retention > 0 {
		// Derived from input events' values, which history could keep.
		v, err := historyValue(ev.Value, st.HistoryFields)
		if err != nil {
			t.dlq(rec, "history: "+err.Error())
			return
		}
		m, errs := t.ev.Mark(ev.Stream, rules.MapFields(ev.Value))
		t.keep(ks, st, ev.Time, v, m, errs)
	}
	for _, w := range st.Windows {
		t.addToWindow(w, ks, ev.Time, rules.MapFields(ev.Value), rec)
	}
	t.feedOperators(st, ks, ev)
}

// feedOperators hands an event of key ks to the joins and patterns over its
// stream.
func (t *Task) feedOperators(st *rules.Stream, ks *keyState, ev *stream.Event) {
	for _, js := range st.Joins {
		t.feedJoin(js.Join, js.Side, ev)
	}
	for _, pi := range st.Patterns {
		t.feedPattern(pi, ks, ev)
	}
}

// dueEntry queues a pattern key at a time; dueHeap orders them by time, then
// key, so that equal times run in a deterministic order.
type dueEntry struct {
	at  int64
	key *patternKey
}

type dueHeap []dueEntry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key.key < h[j].key.key
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// PatternStats calls fn with each pattern's open partial matches (summed
// over keys) and the partial matches its cap has dropped so far. It walks
// every key of the pattern: call it now and then, not per event.
func (t *Task) PatternStats(fn func(pattern string, partials int, dropped int64)) {
	for _, op := range t.patterns {
		n, dropped := op.coldPartials, op.dropped+op.coldDropped
		for _, pk := range op.keys {
			n += pk.state.Len()
			dropped += pk.state.Dropped()
		}
		fn(op.p.Name, n, dropped)
	}
}
