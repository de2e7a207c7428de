package cep

// Checkpointing a State.
//
// A service that runs patterns keeps one State per key and must survive a
// crash: it snapshots every State with Encode and, after a restart, rebuilds
// them with DecodeState. The restored State must behave exactly like the
// original from then on: emit the same matches and timeouts, with the same
// events, at the same calls, and report the same Len, Buffered, Dropped and
// NextDeadline. Everything that influences future behaviour is therefore
// written: the shared buffer (events, and entries with their step,
// predecessor and reference count), the partial matches in their order, the
// completed matches a skip strategy holds back, and the dropped counter.
// Scratch space is not: it is empty between calls.
//
// The encoding is canonical: it depends only on what the State means, not on
// the history of its slices. Free slots are compacted away and entries,
// buffer slots and events are renumbered in the order a walk of the partial
// matches first meets them, so that a restored State encodes to the same
// bytes as the original, and keeps doing so as both are fed the same events.
// DecodeState accepts only canonical input, so that everything it accepts
// re-encodes to the very same bytes; that is what makes corruption visible
// instead of silently changing the matches.
//
// Layout (codec varints unless noted; an index is into a table written
// earlier; "+1" fields use 0 for none):
//
//	version       uvarint, stateVersion
//	nfa shape     steps, states, within (varint), skip kind, skip step+1
//	dropped       uvarint
//	events        count, then per event: time (varint), seq, value (enc)
//	slots         count, then per buffer slot: event index
//	entries       count, then per entry: slot, step, pred+1, refs
//	runs          count, then per partial match: state, last entry,
//	              start (varint), start seq
//	held          count, then per held match: start (varint), start seq,
//	              Match.Start (varint), Match.End (varint), and for each
//	              step of the pattern: count, event indexes
//
// Events are written once, whoever refers to them: a held match refers to the
// same events as the buffer (and as other held matches) did in the original,
// so the restored State hands out Events with the same pointer sharing.
//
// Entries come predecessors first (pred < index), which is what lets the
// decoder rule out cycles, which would make a branch walk loop forever, with
// one comparison per entry.

import (
	"errors"
	"fmt"
	"math"

	"github.com/vigil-cep/vigil/internal/codec"
)

// stateVersion is the first byte of an encoded State. A change to the layout
// gets a new version, so that a checkpoint written by another version is
// refused instead of misread.
const stateVersion = 1

// Encode writes s to e. enc writes one event's Value, which cep does not interpret.
// An event shared by several partial matches is written once.
//
// Encode does not change s. It must not be called from a match or timeout
// callback (the State is in the middle of an event then). On error, e holds
// a partial encoding that the caller must discard.
func (s *State) Encode(e *codec.Encoder, enc func(e *codec.Encoder, v any) error) error {
	if s.cur >= 0 || len(s.done) > 0 || len(s.timeouts) > 0 {
		return errors.New("cep: State.Encode called while an event is being processed")
	}
	n, b := s.nfa, &s.buf
	for _, r := range s.runs {
		if r.last < 0 {
			return errors.New("cep: State.Encode: a partial match without events")
		}
	}
	order, index := entryOrder(b.entries, s.runs)
	if len(order) != len(b.entries)-len(b.freeEntries) {
		// A live entry no partial match reaches would be lost: the state is
		// broken, and writing it would hide that.
		return fmt.Errorf("cep: State.Encode: %d live entries, %d reachable", len(b.entries)-len(b.freeEntries), len(order))
	}

	// Number the slots in the order the entries meet them, and the events in
	// the order the slots, then the held matches, meet them.
	slotIndex := make([]int32, len(b.events)) // 0: not numbered yet, else index+1
	slots := make([]int32, 0, b.live)
	for _, x := range order {
		if sl := b.entries[x].ev; slotIndex[sl] == 0 {
			slots = append(slots, sl)
			slotIndex[sl] = int32(len(slots))
		}
	}
	if len(slots) != b.live {
		return fmt.Errorf("cep: State.Encode: %d events buffered, %d reachable", b.live, len(slots))
	}
	evIndex := make(map[*Event]int, len(slots))
	var events []*Event
	number := func(ev *Event) {
		if _, ok := evIndex[ev]; !ok {
			evIndex[ev] = len(events)
			events = append(events, ev)
		}
	}
	for _, sl := range slots {
		number(b.events[sl].ev)
	}
	for _, c := range s.held {
		if len(c.m.Events) != n.steps {
			return fmt.Errorf("cep: State.Encode: held match with %d steps, pattern has %d", len(c.m.Events), n.steps)
		}
		for _, evs := range c.m.Events {
			for _, ev := range evs {
				number(ev)
			}
		}
	}

	e.Uvarint(stateVersion)
	e.Int(n.steps)
	e.Int(len(n.states))
	e.Varint(n.within)
	e.Int(int(n.skip))
	e.Int(n.skipStep + 1)
	e.Uvarint(uint64(s.dropped))

	e.Int(len(events))
	for _, ev := range events {
		e.Varint(ev.Time)
		e.Uvarint(ev.Seq)
		if err := enc(e, ev.Value); err != nil {
			return fmt.Errorf("cep: encoding the event at time %d, seq %d: %w", ev.Time, ev.Seq, err)
		}
	}
	e.Int(len(slots))
	for _, sl := range slots {
		e.Int(evIndex[b.events[sl].ev])
	}
	e.Int(len(order))
	for _, x := range order {
		en := &b.entries[x]
		e.Int(int(slotIndex[en.ev] - 1))
		e.Int(int(en.step))
		if en.pred < 0 {
			e.Int(0)
		} else {
			e.Int(int(index[en.pred]))
		}
		e.Int(int(en.refs))
	}
	e.Int(len(s.runs))
	for _, r := range s.runs {
		e.Int(int(r.state))
		e.Int(int(index[r.last] - 1))
		e.Varint(r.start)
		e.Uvarint(r.startSeq)
	}
	e.Int(len(s.held))
	for _, c := range s.held {
		e.Varint(c.start)
		e.Uvarint(c.startSeq)
		e.Varint(c.m.Start)
		e.Varint(c.m.End)
		for _, evs := range c.m.Events {
			e.Int(len(evs))
			for _, ev := range evs {
				e.Int(evIndex[ev])
			}
		}
	}
	return nil
}

// entryOrder numbers the entries the partial matches reach: run by run, the
// entries of its branch not numbered yet, predecessors first. order lists
// them by number; index maps an entry to its number plus one (0: not
// reached). Encode writes entries in this order; DecodeState checks that its
// input is in this order, so that a State has exactly one encoding.
func entryOrder(entries []entry, runs []run) (order, index []int32) {
	index = make([]int32, len(entries))
	var chain []int32
	for _, r := range runs {
		chain = chain[:0]
		// Marking the chain as it is walked stops the walk even if the
		// predecessors formed a cycle.
		for x := r.last; x >= 0 && index[x] == 0; x = entries[x].pred {
			chain = append(chain, x)
			index[x] = -1
		}
		for i := len(chain) - 1; i >= 0; i-- {
			order = append(order, chain[i])
			index[chain[i]] = int32(len(order))
		}
	}
	return order, index
}

// DecodeState reads a state written by (*State).Encode for an NFA compiled from the same
// pattern. dec reads one event's Value. Corrupt input (index out of range, reference counts
// that do not add up, unknown states) is reported through d (d.Fail) and DecodeState
// returns nil; it never panics and never allocates more than the input justifies
// (use d.Count(min) for counts).
//
// Beyond indexes, it checks every invariant the NFA relies on and that the
// encoding can break (entries before their successors, steps that never
// decrease along a branch, partial matches ordered by their first event,
// matches held back only behind an older partial match), because a State that
// breaks them would not fail at once but emit wrong matches later, or loop.
// It accepts only what Encode writes, so a State it returns encodes to the
// bytes it read.
//
// "The same pattern" is checked as far as the encoding can tell (number of
// steps and NFA states, within, skip strategy): NFA state indexes mean
// nothing in another pattern's NFA. The cap is not part of it: a State
// restored under a smaller MaxPartials is cut down to it by its next Process.
//
// DecodeState reads one State and leaves the bytes after it: the caller
// calls d.Finish (or reads on) and must check d.Err before using the State.
func (n *NFA) DecodeState(d *codec.Decoder, dec func(d *codec.Decoder) any) *State {
	s := n.decodeState(d, dec)
	if d.Err() != nil {
		return nil // dec may have failed after the last check
	}
	return s
}

// decodeState is DecodeState; every path that returns nil calls d.Fail or
// follows a read that failed.
func (n *NFA) decodeState(d *codec.Decoder, dec func(d *codec.Decoder) any) *State {
	fail := func(format string, args ...any) *State {
		d.Fail("cep state: "+format, args...)
		return nil
	}
	v := d.Uvarint()
	if d.Err() != nil {
		return nil
	}
	if v != stateVersion {
		return fail("unknown version %d", v)
	}
	steps, states, within, skip, skipStep := d.Int(), d.Int(), d.Varint(), d.Int(), d.Int()-1
	if d.Err() != nil {
		return nil
	}
	if steps != n.steps || states != len(n.states) || within != n.within || skip != int(n.skip) || skipStep != n.skipStep {
		return fail("written for another pattern (%d steps, %d states, within %d, skip %d:%d; this one has %d, %d, %d, %d:%d)",
			steps, states, within, skip, skipStep, n.steps, len(n.states), n.within, n.skip, n.skipStep)
	}
	dropped := d.Uvarint()
	if dropped > math.MaxInt64 {
		return fail("dropped count %d out of range", dropped)
	}

	// Events: a time and a seq take a byte each at least.
	events := make([]*Event, d.Count(2))
	for i := range events {
		t, seq := d.Varint(), d.Uvarint()
		v := dec(d)
		if d.Err() != nil {
			return nil
		}
		events[i] = &Event{Time: t, Seq: seq, Value: v}
	}
	// Events must be first referred to in table order, which also proves,
	// at the end, that each is referred to.
	nextEvent := 0
	refEvent := func(k int) bool {
		if k >= len(events) || k > nextEvent {
			return false
		}
		if k == nextEvent {
			nextEvent++
		}
		return true
	}

	slots := make([]slot, d.Count(1))
	for i := range slots {
		k := d.Int()
		if d.Err() != nil {
			return nil
		}
		if !refEvent(k) {
			return fail("slot %d: event %d out of range or out of order (%d events, next new %d)", i, k, len(events), nextEvent)
		}
		slots[i].ev = events[k]
	}

	entries := make([]entry, d.Count(4))
	root := make([]int32, len(entries)) // first entry of each entry's branch
	nextSlot := 0
	for i := range entries {
		sl, step, pred, refs := d.Int(), d.Int(), d.Int()-1, d.Int()
		if d.Err() != nil {
			return nil
		}
		switch {
		case sl >= len(slots) || sl > nextSlot:
			return fail("entry %d: slot %d out of range or out of order (%d slots, next new %d)", i, sl, len(slots), nextSlot)
		case step >= n.steps:
			return fail("entry %d: step %d out of range (%d steps)", i, step, n.steps)
		case pred >= i:
			return fail("entry %d: predecessor %d does not come before it", i, pred)
		case pred >= 0 && int(entries[pred].step) > step:
			return fail("entry %d: step %d after step %d: a branch's steps never decrease", i, step, entries[pred].step)
		case refs == 0:
			return fail("entry %d: no reference", i)
		}
		if sl == nextSlot {
			nextSlot++
		}
		slots[sl].refs++
		entries[i] = entry{ev: int32(sl), step: int32(step), pred: int32(pred), refs: int32(refs)}
		root[i] = int32(i)
		if pred >= 0 {
			root[i] = root[pred]
		}
	}
	if nextSlot != len(slots) {
		return fail("slot %d: no entry refers to it", nextSlot)
	}

	runs := make([]run, d.Count(4))
	for i := range runs {
		st, last, start, seq := d.Int(), d.Int(), d.Varint(), d.Uvarint()
		if d.Err() != nil {
			return nil
		}
		if st >= len(n.states) {
			return fail("partial match %d: unknown state %d (%d states)", i, st, len(n.states))
		}
		// A partial match never rests in the final state (it completes) nor
		// in a stop state (it is discarded).
		if k := n.states[st].kind; k != kindNormal && k != kindPending {
			return fail("partial match %d: state %d is not a waiting state", i, st)
		}
		if last >= len(entries) {
			return fail("partial match %d: entry %d out of range (%d entries)", i, last, len(entries))
		}
		// Timeouts, the cap and the skip strategies find partial matches by
		// start: it must be the branch's first event, and runs in its order.
		first := slots[entries[root[last]].ev].ev
		if start != first.Time || seq != first.Seq {
			return fail("partial match %d: starts at %d/%d, its first event is %d/%d", i, start, seq, first.Time, first.Seq)
		}
		runs[i] = run{state: int32(st), last: int32(last), start: start, startSeq: seq}
		if i > 0 && runs[i].before(runs[i-1].start, runs[i-1].startSeq) {
			return fail("partial match %d: out of start order", i)
		}
	}

	// Reference counts must add up: an entry is referred to by the partial
	// matches that end with it and by the entries that follow it. A count
	// too high would leak the entry; too low would free it while in use.
	refs := make([]int32, len(entries))
	for _, en := range entries {
		if en.pred >= 0 {
			refs[en.pred]++
		}
	}
	for _, r := range runs {
		refs[r.last]++
	}
	for i, en := range entries {
		if en.refs != refs[i] {
			return fail("entry %d: %d references recorded, %d found", i, en.refs, refs[i])
		}
	}
	order, _ := entryOrder(entries, runs)
	for i, x := range order {
		if int(x) != i {
			return fail("entry %d: out of order (the walk of the partial matches meets entry %d there)", i, x)
		}
	}
	if len(order) != len(entries) {
		return fail("%d entries, %d reached by partial matches", len(entries), len(order))
	}

	// Held matches: a start, a seq, Match.Start, Match.End and a count per
	// step take a byte each at least.
	held := make([]completed, d.Count(4+n.steps))
	if len(held) > 0 && n.skip == NoSkip {
		return fail("%d matches held back without a skip strategy", len(held))
	}
	for i := range held {
		c := &held[i]
		c.start, c.startSeq, c.m.Start, c.m.End = d.Varint(), d.Uvarint(), d.Varint(), d.Varint()
		c.m.Events = make([][]*Event, n.steps)
		for step := range c.m.Events {
			k := d.Count(1)
			if k == 0 {
				continue // nil, as materialize leaves a step without events
			}
			evs := make([]*Event, k)
			for j := range evs {
				x := d.Int()
				if d.Err() != nil {
					return nil
				}
				if !refEvent(x) {
					return fail("held match %d: event %d out of range or out of order (%d events, next new %d)", i, x, len(events), nextEvent)
				}
				evs[j] = events[x]
			}
			c.m.Events[step] = evs
		}
		if d.Err() != nil {
			return nil
		}
		first := firstEvent(c.m.Events)
		if first == nil {
			return fail("held match %d: no events", i)
		}
		if c.start != first.Time || c.startSeq != first.Seq {
			return fail("held match %d: starts at %d/%d, its first event is %d/%d", i, c.start, c.startSeq, first.Time, first.Seq)
		}
		if i > 0 && compareCompleted(held[i-1], *c) > 0 {
			return fail("held match %d: out of order", i)
		}
	}
	// A match is held back only while an older partial match may still
	// prune it; otherwise the last call would have emitted it.
	if len(held) > 0 && (len(runs) == 0 || !runs[0].before(held[0].start, held[0].startSeq)) {
		return fail("a match is held back, but no partial match started before it")
	}
	if nextEvent != len(events) {
		return fail("event %d: nothing refers to it", nextEvent)
	}

	s := n.NewState()
	s.buf = buffer{entries: entries, events: slots, live: len(slots)}
	s.runs = runs
	s.held = held
	s.dropped = int64(dropped)
	return s
}
