package cep

import (
	"cmp"
	"math"
	"slices"
)

// State is one key's NFA state: its partial matches and the shared buffer of
// their events. It is not safe for concurrent use: one goroutine owns it.
type State struct {
	nfa *NFA
	buf buffer
	// runs are the open partial matches (FlinkCEP's computation states),
	// ordered by start event. The start state's run is implicit.
	runs []run
	// held are completed matches a skip strategy holds back until no open
	// partial match started before them, ordered by compareEvents.
	held    []completed
	dropped int64

	cur int32 // slot of the event being processed; -1 until a branch takes it
}

// work is the scratch space of a State's calls, which each leaves empty
// (but next, which becomes the runs). One per NFA, shared by its States
// (see NFA): a key's state does not keep space of its own that it uses only
// while an event passes, and steady-state processing does not allocate.
type work struct {
	next     []run
	done     []completed
	timeouts []Timeout
	stack    []int32
	edges    []edgeRef
	scratch  []*Event // Partial.Events results
	ctx      partialCtx
}

// run is one partial match: the NFA state it is in and the last entry of its
// branch in the buffer.
type run struct {
	state    int32
	last     int32
	start    int64 // time and Seq of its first event
	startSeq uint64
}

func (r *run) before(t int64, seq uint64) bool {
	return r.start < t || r.start == t && r.startSeq < seq
}

// completed is a match waiting to be emitted.
type completed struct {
	start    int64
	startSeq uint64
	m        Match
}

// edgeRef names a transition that accepted the current event.
type edgeRef struct {
	from int32
	t    int32
}

// partialCtx is the Partial handed to conditions: the partial match whose
// edges are being evaluated.
type partialCtx struct {
	s    *State
	last int32
	memo []uint8 // by condition (guard.id): memoUnknown, memoFalse, memoTrue
}

// Events implements Partial. It walks the branch back from its last entry and
// returns a slice of the State's scratch space, which is reset only after the
// conditions of the partial match have run.
func (c *partialCtx) Events(step int) []*Event {
	s := c.s
	lo := len(s.nfa.work.scratch)
	for e := c.last; e >= 0; {
		en := &s.buf.entries[e]
		if int(en.step) < step {
			break
		}
		if int(en.step) == step {
			s.nfa.work.scratch = append(s.nfa.work.scratch, s.buf.events[en.ev].ev)
		}
		e = en.pred
	}
	out := s.nfa.work.scratch[lo:len(s.nfa.work.scratch):len(s.nfa.work.scratch)]
	slices.Reverse(out)
	return out
}

// NewState returns an empty state for one key.
func (n *NFA) NewState() *State {
	s := new(State)
	n.InitState(s)
	return s
}

// InitState makes *s an empty state for one key, for a caller that keeps
// States by value, inside its own per-key state: one allocation per key
// fewer. A State must not be copied once used.
func (n *NFA) InitState(s *State) { *s = State{nfa: n, cur: -1} }

// Process feeds the next event of this key. Callers feed events in time order,
// ties in Seq order; (Time, Seq) is the order cep sorts events by (FlinkCEP's
// EventId). Process first advances time to ev.Time (see Advance), then runs
// the event, calling match for the matches it completes and timeout for the
// partial matches that time out. Either callback may be nil.
//
// Matches completed by one event are emitted in start order (then by their
// events, then their steps). With a skip strategy other than NoSkip, a
// completed match is held back while a partial match that started before it
// is open, as FlinkCEP does, because that one may still complete and prune it;
// held matches are emitted by the call that ends the last such partial match.
// After the event, if more than MaxPartials partial and held matches remain,
// the oldest partial matches are dropped (State.Dropped).
func (s *State) Process(ev *Event, match func(Match), timeout func(Timeout)) {
	s.advance(ev.Time, match, timeout)

	s.nfa.work.next = s.nfa.work.next[:0]
	for i := range s.runs {
		s.step(&s.runs[i], ev, false)
	}
	first := len(s.nfa.work.next)
	start := run{state: s.nfa.start, last: -1}
	s.step(&start, ev, true)
	s.placeNew(first, ev)
	if s.cur >= 0 {
		s.buf.unhold(s.cur)
		s.cur = -1
	}
	clear(s.nfa.work.scratch[:cap(s.nfa.work.scratch)])
	s.nfa.work.scratch = s.nfa.work.scratch[:0]
	s.runs, s.nfa.work.next = s.nfa.work.next, s.runs

	s.complete(match)
	s.enforceCap(match)
}

// Advance moves time to t without an event (the watermark passed t): partial
// matches with t - start >= Within time out (timeout is called), and a
// trailing NotFollowedBy whose window passed completes as a match (match is
// called). Matches come before timeouts; each group is sorted as in Process.
// A partial match waiting in two NFA states at once (for example, in a loop
// and for the step after it) times out once. Either callback may be nil.
//
// Advance(math.MaxInt64) is the end of a bounded input (docs/design.md
// "Watermarks"): no event can follow, so no partial match can continue, and
// every one ends as if its Within had passed: a trailing NotFollowedBy
// completes as a match, the others time out; without Within they end without
// a word, as a partial match that never completes does. The matches a skip
// strategy held back behind them are then emitted, pruned by one another as
// the strategy says: for b+ c under SkipToFirst(b) over b1 b2 b3 c, with the
// loops still open after c, that is b1 b2 b3 c, b2 b3 c and b3 c, FlinkCEP's
// documented result. The State is then Empty.
func (s *State) Advance(t int64, match func(Match), timeout func(Timeout)) {
	if t == math.MaxInt64 {
		s.expire(len(s.runs), match, timeout)
		return
	}
	s.advance(t, match, timeout)
}

// Len returns the number of open partial matches, counting the completed
// matches a skip strategy holds back; MaxPartials bounds it.
func (s *State) Len() int { return len(s.runs) + len(s.held) }

// Buffered returns the number of events held in the shared buffer.
func (s *State) Buffered() int { return s.buf.live }

// Dropped returns the number of partial matches MaxPartials dropped so far.
func (s *State) Dropped() int64 { return s.dropped }

// Empty reports whether the state holds nothing: the caller can delete it and
// start over with NewState.
func (s *State) Empty() bool { return len(s.runs) == 0 && len(s.held) == 0 }

// step runs the event through one partial match (FlinkCEP's
// computeNextStates): it follows the proceed edges the event allows, then
// takes every take and ignore edge that accepts it. The successors go to
// next, or done when they complete (NFA.work). A path that reaches a stop state (a
// negative step's event) loses its successors, but keeps its completed matches.
func (s *State) step(r *run, ev *Event, isStart bool) {
	n := s.nfa
	s.nfa.work.scratch = s.nfa.work.scratch[:0]
	s.nfa.work.ctx.s, s.nfa.work.ctx.last = s, r.last
	clear(s.nfa.work.ctx.memo)
	s.nfa.work.edges = s.nfa.work.edges[:0]
	s.nfa.work.stack = append(s.nfa.work.stack[:0], r.state)
	discard := false
	for len(s.nfa.work.stack) > 0 {
		st := s.nfa.work.stack[len(s.nfa.work.stack)-1]
		s.nfa.work.stack = s.nfa.work.stack[:len(s.nfa.work.stack)-1]
		for i := range n.states[st].trans {
			t := &n.states[st].trans[i]
			if !t.g.eval(ev, &s.nfa.work.ctx) {
				continue
			}
			switch {
			case t.act != actProceed:
				s.nfa.work.edges = append(s.nfa.work.edges, edgeRef{from: st, t: int32(i)})
			case n.states[t.to].kind == kindStop:
				discard = true
			default:
				s.nfa.work.stack = append(s.nfa.work.stack, t.to)
			}
		}
	}

	first := len(s.nfa.work.next)
	for _, e := range s.nfa.work.edges {
		t := &n.states[e.from].trans[e.t]
		if t.act == actIgnore {
			// The start state never waits: it is there for every event.
			if !isStart {
				s.add(run{state: t.to, last: r.last, start: r.start, startSeq: r.startSeq})
			}
			continue
		}
		if s.cur < 0 {
			s.cur = s.buf.hold(ev)
		}
		ent := s.buf.put(s.cur, n.states[e.from].step, r.last)
		s.buf.lock(ent) // until the successors hold it
		next := run{state: t.to, last: ent, start: r.start, startSeq: r.startSeq}
		if isStart {
			next.start, next.startSeq = ev.Time, ev.Seq
		}
		s.add(next)
		if s.finalAfter(t.to, ev) {
			next.state = finalState
			s.add(next)
		}
		s.buf.release(ent)
	}
	if discard {
		for _, x := range s.nfa.work.next[first:] {
			s.buf.release(x.last)
		}
		s.nfa.work.next = s.nfa.work.next[:first]
	}
	s.buf.release(r.last)
}

// add records a successor: a completed match, or a partial match that holds
// its last entry.
func (s *State) add(r run) {
	if s.nfa.states[r.state].kind == kindFinal {
		s.nfa.work.done = append(s.nfa.work.done, completed{
			start: r.start, startSeq: r.startSeq,
			m: Match{Start: r.start, End: s.buf.events[s.buf.entries[r.last].ev].ev.Time, Events: s.buf.materialize(r.last, s.nfa.steps)},
		})
		return
	}
	s.buf.lock(r.last)
	s.nfa.work.next = append(s.nfa.work.next, r)
}

// finalAfter reports whether st reaches the final state through proceed edges
// that accept ev (FlinkCEP's findFinalStateAfterProceed): the event just
// taken completes a match, as well as possibly continuing it.
func (s *State) finalAfter(st int32, ev *Event) bool {
	states := s.nfa.states
	s.nfa.work.stack = append(s.nfa.work.stack[:0], st)
	for len(s.nfa.work.stack) > 0 {
		x := s.nfa.work.stack[len(s.nfa.work.stack)-1]
		s.nfa.work.stack = s.nfa.work.stack[:len(s.nfa.work.stack)-1]
		for i := range states[x].trans {
			t := &states[x].trans[i]
			if t.act != actProceed || !t.g.eval(ev, &s.nfa.work.ctx) {
				continue
			}
			if states[t.to].kind == kindFinal {
				return true
			}
			s.nfa.work.stack = append(s.nfa.work.stack, t.to)
		}
	}
	return false
}

// placeNew moves the partial matches the start state created, next[first:],
// to their place in start order. They come last unless ev is older than a
// partial match's start, which only happens when events are fed out of order.
func (s *State) placeNew(first int, ev *Event) {
	if first == 0 || first == len(s.nfa.work.next) || s.nfa.work.next[first-1].before(ev.Time, ev.Seq) {
		return
	}
	pos, _ := slices.BinarySearchFunc(s.nfa.work.next[:first], ev, func(r run, ev *Event) int {
		if r.before(ev.Time, ev.Seq) {
			return -1
		}
		return 1
	})
	// Rotate next[pos:] so that the new block comes first.
	slices.Reverse(s.nfa.work.next[pos:first])
	slices.Reverse(s.nfa.work.next[first:])
	slices.Reverse(s.nfa.work.next[pos:])
}

// advance times out the partial matches that started Within or longer before
// t. They are a prefix of s.runs, which is ordered by start.
func (s *State) advance(t int64, match func(Match), timeout func(Timeout)) {
	w := s.nfa.within
	if w <= 0 {
		return
	}
	k := 0
	for k < len(s.runs) && expired(s.runs[k].start, t, w) {
		k++
	}
	s.expire(k, match, timeout)
}

// expire ends the first k partial matches, as their Within passing does, and
// emits what that completes or lets out. Without Within (the end of a bounded
// input) they end and report nothing.
func (s *State) expire(k int, match func(Match), timeout func(Timeout)) {
	if k == 0 {
		return
	}
	w := s.nfa.within
	for _, r := range s.runs[:k] {
		switch {
		case w <= 0:
		case s.nfa.states[r.state].kind == kindPending:
			s.nfa.work.done = append(s.nfa.work.done, completed{
				start: r.start, startSeq: r.startSeq,
				m: Match{Start: r.start, End: addSat(r.start, w), Events: s.buf.materialize(r.last, s.nfa.steps)},
			})
		case timeout != nil:
			s.nfa.work.timeouts = append(s.nfa.work.timeouts, Timeout{Start: r.start, Deadline: addSat(r.start, w), Events: s.buf.materialize(r.last, s.nfa.steps)})
		}
		s.buf.release(r.last)
	}
	s.runs = s.runs[:copy(s.runs, s.runs[k:])]

	s.complete(match)

	if len(s.nfa.work.timeouts) > 0 {
		slices.SortFunc(s.nfa.work.timeouts, func(a, b Timeout) int { return compareEvents(a.Events, b.Events) })
		for i, to := range s.nfa.work.timeouts {
			if i == 0 || compareEvents(s.nfa.work.timeouts[i-1].Events, to.Events) != 0 {
				timeout(to)
			}
		}
		clear(s.nfa.work.timeouts)
		s.nfa.work.timeouts = s.nfa.work.timeouts[:0]
	}
}

// expired reports t - start >= within without overflowing.
func expired(start, t, within int64) bool {
	return t >= start && uint64(t)-uint64(start) >= uint64(within)
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// complete emits the matches in done: all of them under NoSkip, otherwise
// through s.held, in start order, pruning by the skip strategy. It runs after
// every change to s.runs, since a partial match that ended may let held
// matches out.
func (s *State) complete(match func(Match)) {
	slices.SortFunc(s.nfa.work.done, compareCompleted)
	if s.nfa.skip == NoSkip {
		if match != nil {
			for _, c := range s.nfa.work.done {
				match(c.m)
			}
		}
	} else {
		if len(s.nfa.work.done) > 0 {
			s.held = append(s.held, s.nfa.work.done...)
			slices.SortStableFunc(s.held, compareCompleted)
		}
		s.emitHeld(match)
	}
	clear(s.nfa.work.done)
	s.nfa.work.done = s.nfa.work.done[:0]
}

// emitHeld emits the held matches that started no later than every open
// partial match (FlinkCEP's processMatchesAccordingToSkipStrategy). Each one
// emitted discards the partial and held matches its skip strategy prunes:
// those whose start is before (or, for SkipToNext and SkipPastLastEvent, at)
// the strategy's event in the match.
func (s *State) emitHeld(match func(Match)) {
	i := 0
	for i < len(s.held) {
		c := s.held[i]
		if len(s.runs) > 0 && s.runs[0].before(c.start, c.startSeq) {
			break
		}
		i++
		if bound, incl, ok := s.pruneBound(c.m); ok {
			k := 0
			for k < len(s.runs) && pruned(s.runs[k].start, s.runs[k].startSeq, bound, incl) {
				s.buf.release(s.runs[k].last)
				k++
			}
			s.runs = s.runs[:copy(s.runs, s.runs[k:])]
			for i < len(s.held) && pruned(s.held[i].start, s.held[i].startSeq, bound, incl) {
				i++
			}
		}
		if match != nil {
			match(c.m)
		}
	}
	n := copy(s.held, s.held[i:])
	clear(s.held[n:])
	s.held = s.held[:n]
}

// pruneBound returns the event of m the skip strategy prunes up to, whether
// the bound itself is pruned, and false when nothing is pruned (SkipToFirst
// and SkipToLast to a step without events in m).
func (s *State) pruneBound(m Match) (bound *Event, incl, ok bool) {
	switch s.nfa.skip {
	case SkipToNext:
		return firstEvent(m.Events), true, true
	case SkipPastLastEvent:
		return lastEvent(m.Events), true, true
	case SkipToFirst:
		if evs := m.Events[s.nfa.skipStep]; len(evs) > 0 {
			return evs[0], false, true
		}
	case SkipToLast:
		if evs := m.Events[s.nfa.skipStep]; len(evs) > 0 {
			return evs[len(evs)-1], false, true
		}
	}
	return nil, false, false
}

// pruned reports whether a match that started at (t, seq) is pruned by bound.
func pruned(t int64, seq uint64, bound *Event, incl bool) bool {
	if t != bound.Time {
		return t < bound.Time
	}
	return seq < bound.Seq || incl && seq == bound.Seq
}

func firstEvent(evs [][]*Event) *Event {
	for _, e := range evs {
		if len(e) > 0 {
			return e[0]
		}
	}
	return nil
}

func lastEvent(evs [][]*Event) *Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; len(e) > 0 {
			return e[len(e)-1]
		}
	}
	return nil
}

// enforceCap drops the oldest partial matches while partial and held matches
// together exceed MaxPartials. Dropping a partial match may let held matches
// out, which are emitted.
func (s *State) enforceCap(match func(Match)) {
	for limit := s.nfa.maxPartials; len(s.runs)+len(s.held) > limit && len(s.runs) > 0; {
		k := min(len(s.runs), len(s.runs)+len(s.held)-limit)
		for _, r := range s.runs[:k] {
			s.buf.release(r.last)
		}
		s.runs = s.runs[:copy(s.runs, s.runs[k:])]
		s.dropped += int64(k)
		s.emitHeld(match)
	}
}

func compareCompleted(a, b completed) int { return compareEvents(a.m.Events, b.m.Events) }

// compareEvents orders matches by their events in order, (Time, Seq) each,
// then by the step that took them; a match that is a prefix of another comes
// first. Matches start with their start event, so this orders them by start
// first.
func compareEvents(a, b [][]*Event) int {
	ia, ja, ib, jb := 0, 0, 0, 0
	for {
		for ia < len(a) && ja == len(a[ia]) {
			ia, ja = ia+1, 0
		}
		for ib < len(b) && jb == len(b[ib]) {
			ib, jb = ib+1, 0
		}
		if ia == len(a) || ib == len(b) {
			return cmp.Compare(len(a)-ia, len(b)-ib)
		}
		x, y := a[ia][ja], b[ib][jb]
		if c := cmp.Or(cmp.Compare(x.Time, y.Time), cmp.Compare(x.Seq, y.Seq), cmp.Compare(ia, ib)); c != 0 {
			return c
		}
		ja, jb = ja+1, jb+1
	}
}
