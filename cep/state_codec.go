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
	if s.cur >= 0 || len(s.nfa.work.done) > 0 || len(s.nfa.work.timeouts) > 0 {
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
	s := new(State)
	if !n.DecodeStateInto(s, d, dec) {
		return nil
	}
	return s
}

// DecodeStateInto is DecodeState into *s, for a caller that keeps States by
// value (InitState). It reports whether d has no error; *s is then the
// State read, and otherwise unchanged.
func (n *NFA) DecodeStateInto(s *State, d *codec.Decoder, dec func(d *codec.Decoder) any) bool {
	r := stateReader{nfa: n, d: d}
	if !r.readHeader() || !r.readDropped() {
		return false
	}
	// The event table and the branch roots are scratch, made here rather
	// than kept in r: escape analysis does not tell r's fields apart, so
	// next to the tables the State keeps they would go to the heap, while
	// here small ones stay on the stack.
	//
	// A time and a seq take a byte each at least.
	events := eventRefs{table: make([]*Event, d.Count(2))}
	if !r.readEvents(events.table, dec) || !r.readSlots(&events) || !r.readEntries() {
		return false
	}
	root := branchRoots(r.entries, make([]int32, len(r.entries)))
	ok := r.readRuns(root) &&
		r.checkRefCounts() &&
		r.checkWalkOrder() &&
		r.readHeld(&events) &&
		r.checkHeldBlocked() &&
		r.checkEventsReferred(&events)
	if !ok {
		return false
	}
	n.InitState(s)
	s.buf = buffer{entries: r.entries, events: r.slots, live: len(r.slots)}
	s.runs = r.runs
	s.held = r.held
	s.dropped = r.dropped
	return true
}

// stateReader is one DecodeState call. It reads the sections in the order
// Encode writes them, so that every index is checked against a table that is
// already complete and checked, and checks what only the whole can tell (that
// reference counts add up, that nothing is left unreferred) once all is read.
//
// Every read and check method reports corrupt input through d (d.Fail) and
// returns false once d has an error, so that DecodeState stops at the first
// error and returns a State only when d has none.
type stateReader struct {
	nfa *NFA
	d   *codec.Decoder

	// What the State keeps.
	dropped int64
	slots   []slot
	entries []entry
	runs    []run
	held    []completed
}

// eventRefs is the event table, and how far slots and held matches have
// referred to it. Events must be first referred to in table order, the order
// Encode numbers them in, so that the encoding stays canonical; that also
// proves with one comparison, at the end, that every event is referred to.
type eventRefs struct {
	table []*Event
	next  int // the first event nothing has referred to yet
}

// ref returns event k, or false if k is out of range or refers to an event
// after the next new one.
func (e *eventRefs) ref(k int) (*Event, bool) {
	if k >= len(e.table) || k > e.next {
		return nil, false
	}
	if k == e.next {
		e.next++
	}
	return e.table[k], true
}

// readEventRef reads the index of the event that the slot or held match
// named by what and i (as in "slot 3") refers to. The name starts the error
// message, so that a corrupt checkpoint says where it is corrupt. It returns
// nil once d has an error.
func (r *stateReader) readEventRef(events *eventRefs, what string, i int) *Event {
	k := r.d.Int()
	if r.d.Err() != nil {
		return nil
	}
	ev, ok := events.ref(k)
	if !ok {
		r.fail("%s %d: event %d out of range or out of order (%d events, next new %d)", what, i, k, len(events.table), events.next)
		return nil
	}
	return ev
}

// fail reports corrupt input, under a prefix that tells which part of a
// checkpoint was being decoded. It returns false for the callers' returns.
func (r *stateReader) fail(format string, args ...any) bool {
	r.d.Fail("cep state: "+format, args...)
	return false
}

// readHeader reads the version and the shape of the NFA the State was written
// for, before anything else: a checkpoint of another layout, or of another
// pattern, whose NFA state indexes mean nothing here, must be refused, not
// misread.
func (r *stateReader) readHeader() bool {
	d, n := r.d, r.nfa
	v := d.Uvarint()
	if d.Err() != nil {
		return false
	}
	if v != stateVersion {
		return r.fail("unknown version %d", v)
	}
	steps, states, within, skip, skipStep := d.Int(), d.Int(), d.Varint(), d.Int(), d.Int()-1
	if d.Err() != nil {
		return false
	}
	if steps != n.steps || states != len(n.states) || within != n.within || skip != int(n.skip) || skipStep != n.skipStep {
		return r.fail("written for another pattern (%d steps, %d states, within %d, skip %d:%d; this one has %d, %d, %d, %d:%d)",
			steps, states, within, skip, skipStep, n.steps, len(n.states), n.within, n.skip, n.skipStep)
	}
	return true
}

// readDropped reads the dropped counter, written unsigned: a value an int64
// cannot hold can only be corruption.
func (r *stateReader) readDropped() bool {
	dropped := r.d.Uvarint()
	if dropped > math.MaxInt64 {
		return r.fail("dropped count %d out of range", dropped)
	}
	r.dropped = int64(dropped)
	return r.d.Err() == nil
}

// readEvents fills the event table. Events are written once however many
// slots and held matches refer to them, so that the restored State shares
// *Event pointers where the original did.
func (r *stateReader) readEvents(table []*Event, dec func(d *codec.Decoder) any) bool {
	d := r.d
	for i := range table {
		t, seq := d.Varint(), d.Uvarint()
		v := dec(d)
		if d.Err() != nil {
			return false
		}
		table[i] = &Event{Time: t, Seq: seq, Value: v}
	}
	return d.Err() == nil
}

// readSlots reads the shared buffer's event slots. Their reference counts are
// not written: readEntries counts them, so they cannot disagree with the
// entries.
func (r *stateReader) readSlots(events *eventRefs) bool {
	d := r.d
	r.slots = make([]slot, d.Count(1))
	for i := range r.slots {
		if r.slots[i].ev = r.readEventRef(events, "slot", i); r.slots[i].ev == nil {
			return false
		}
	}
	return d.Err() == nil
}

// readEntries reads the shared buffer's entries and counts the slots'
// references. It also proves that every slot is referred to: slots must be
// first used in order, so one comparison with the next new slot at the end
// proves it.
func (r *stateReader) readEntries() bool {
	d := r.d
	r.entries = make([]entry, d.Count(4))
	nextSlot := 0
	for i := range r.entries {
		sl, step, pred, refs := d.Int(), d.Int(), d.Int()-1, d.Int()
		if d.Err() != nil || !r.checkEntry(i, sl, step, pred, refs, nextSlot) {
			return false
		}
		if sl == nextSlot {
			nextSlot++
		}
		r.slots[sl].refs++
		r.entries[i] = entry{ev: int32(sl), step: int32(step), pred: int32(pred), refs: int32(refs)}
	}
	if nextSlot != len(r.slots) {
		return r.fail("slot %d: no entry refers to it", nextSlot)
	}
	return d.Err() == nil
}

// checkEntry checks entry i against the entries before it. Its predecessor
// must come first, which rules out the cycles that would make a branch walk
// loop forever, with one comparison; steps never decrease along a branch, as
// the NFA takes events step after step; and slots are first used in order,
// the order Encode numbers them in.
func (r *stateReader) checkEntry(i, sl, step, pred, refs, nextSlot int) bool {
	switch {
	case sl >= len(r.slots) || sl > nextSlot:
		return r.fail("entry %d: slot %d out of range or out of order (%d slots, next new %d)", i, sl, len(r.slots), nextSlot)
	case step >= r.nfa.steps:
		return r.fail("entry %d: step %d out of range (%d steps)", i, step, r.nfa.steps)
	case pred >= i:
		return r.fail("entry %d: predecessor %d does not come before it", i, pred)
	case pred >= 0 && int(r.entries[pred].step) > step:
		return r.fail("entry %d: step %d after step %d: a branch's steps never decrease", i, step, r.entries[pred].step)
	case refs == 0:
		return r.fail("entry %d: no reference", i)
	}
	return true
}

// branchRoots fills root with the first entry of each entry's branch, in one
// pass since predecessors come first, so that readRuns finds a partial
// match's first event without walking its branch. It returns root.
func branchRoots(entries []entry, root []int32) []int32 {
	for i, en := range entries {
		root[i] = int32(i)
		if en.pred >= 0 {
			root[i] = root[en.pred]
		}
	}
	return root
}

// readRuns reads the partial matches. A partial match never rests in the
// final state (it completes) nor in a stop state (it is discarded). Timeouts,
// the cap and the skip strategies find partial matches by start, so its start
// must be its branch's first event, and the partial matches come in start
// order.
func (r *stateReader) readRuns(root []int32) bool {
	d, n := r.d, r.nfa
	r.runs = make([]run, d.Count(4))
	for i := range r.runs {
		st, last, start, seq := d.Int(), d.Int(), d.Varint(), d.Uvarint()
		if d.Err() != nil {
			return false
		}
		if st >= len(n.states) {
			return r.fail("partial match %d: unknown state %d (%d states)", i, st, len(n.states))
		}
		if k := n.states[st].kind; k != kindNormal && k != kindPending {
			return r.fail("partial match %d: state %d is not a waiting state", i, st)
		}
		if last >= len(r.entries) {
			return r.fail("partial match %d: entry %d out of range (%d entries)", i, last, len(r.entries))
		}
		first := r.slots[r.entries[root[last]].ev].ev
		if start != first.Time || seq != first.Seq {
			return r.fail("partial match %d: starts at %d/%d, its first event is %d/%d", i, start, seq, first.Time, first.Seq)
		}
		r.runs[i] = run{state: int32(st), last: int32(last), start: start, startSeq: seq}
		if i > 0 && r.runs[i].before(r.runs[i-1].start, r.runs[i-1].startSeq) {
			return r.fail("partial match %d: out of start order", i)
		}
	}
	return d.Err() == nil
}

// checkRefCounts checks that each entry's reference count is what the buffer
// would have counted: the partial matches that end with it and the entries
// that follow it. A count too high would leak the entry; too low would free
// it while in use.
func (r *stateReader) checkRefCounts() bool {
	refs := make([]int32, len(r.entries))
	for _, en := range r.entries {
		if en.pred >= 0 {
			refs[en.pred]++
		}
	}
	for _, ru := range r.runs {
		refs[ru.last]++
	}
	for i, en := range r.entries {
		if en.refs != refs[i] {
			return r.fail("entry %d: %d references recorded, %d found", i, en.refs, refs[i])
		}
	}
	return true
}

// checkWalkOrder checks that the entries come in the order Encode writes
// them, the order a walk of the partial matches first meets them, so that a
// State has one encoding; and that the walk reaches them all, since an entry
// no partial match reaches would never be freed.
func (r *stateReader) checkWalkOrder() bool {
	order, _ := entryOrder(r.entries, r.runs)
	for i, x := range order {
		if int(x) != i {
			return r.fail("entry %d: out of order (the walk of the partial matches meets entry %d there)", i, x)
		}
	}
	if len(order) != len(r.entries) {
		return r.fail("%d entries, %d reached by partial matches", len(r.entries), len(order))
	}
	return true
}

// readHeld reads the completed matches a skip strategy holds back. Only a
// skip strategy holds matches back, and it emits them in order; a held
// match's start must be its first event, as for a partial match, since the
// skip strategies compare the two.
func (r *stateReader) readHeld(events *eventRefs) bool {
	d, n := r.d, r.nfa
	// A start, a seq, Match.Start, Match.End and a count per step take a
	// byte each at least.
	r.held = make([]completed, d.Count(4+n.steps))
	if len(r.held) > 0 && n.skip == NoSkip {
		return r.fail("%d matches held back without a skip strategy", len(r.held))
	}
	for i := range r.held {
		c := &r.held[i]
		c.start, c.startSeq, c.m.Start, c.m.End = d.Varint(), d.Uvarint(), d.Varint(), d.Varint()
		if !r.readHeldEvents(i, &c.m, events) {
			return false
		}
		first := firstEvent(c.m.Events)
		if first == nil {
			return r.fail("held match %d: no events", i)
		}
		if c.start != first.Time || c.startSeq != first.Seq {
			return r.fail("held match %d: starts at %d/%d, its first event is %d/%d", i, c.start, c.startSeq, first.Time, first.Seq)
		}
		if i > 0 && compareCompleted(r.held[i-1], *c) > 0 {
			return r.fail("held match %d: out of order", i)
		}
	}
	return d.Err() == nil
}

// readHeldEvents reads the events of held match i, step by step, as indexes
// into the event table: a held match shares its events with the buffer and
// with the other held matches, as it did in the original State.
func (r *stateReader) readHeldEvents(i int, m *Match, events *eventRefs) bool {
	d := r.d
	m.Events = make([][]*Event, r.nfa.steps)
	for step := range m.Events {
		k := d.Count(1)
		if k == 0 {
			continue // nil, as materialize leaves a step without events
		}
		evs := make([]*Event, k)
		for j := range evs {
			if evs[j] = r.readEventRef(events, "held match", i); evs[j] == nil {
				return false
			}
		}
		m.Events[step] = evs
	}
	return d.Err() == nil
}

// checkHeldBlocked checks that a match is held back only while an older
// partial match may still prune it; otherwise the last call would have
// emitted it.
func (r *stateReader) checkHeldBlocked() bool {
	if len(r.held) > 0 && (len(r.runs) == 0 || !r.runs[0].before(r.held[0].start, r.held[0].startSeq)) {
		return r.fail("a match is held back, but no partial match started before it")
	}
	return true
}

// checkEventsReferred checks that every event is referred to, by a slot or a
// held match, since Encode writes only those.
func (r *stateReader) checkEventsReferred(events *eventRefs) bool {
	if events.next != len(events.table) {
		return r.fail("event %d: nothing refers to it", events.next)
	}
	return true
}
