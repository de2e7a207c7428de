package cep

import (
	"errors"
	"fmt"
	"slices"
)

// NFA is a compiled pattern. It is immutable and safe for concurrent use; the
// per-key state lives in State.
type NFA struct {
	steps       int
	states      []nstate
	start       int32
	within      int64
	skip        SkipKind
	skipStep    int // step of SkipToFirst and SkipToLast
	maxPartials int
	work        work // the scratch space of its States' calls
}

// nstate is one NFA state. Several states belong to one step (a times step is
// a chain of states, a loop has a state for "just took an event" and one for
// "skipped an event"); step says which, and is the step a take from this state
// records the event under.
type nstate struct {
	kind  stateKind
	step  int32
	trans []transition
}

type stateKind uint8

const (
	kindNormal stateKind = iota
	// kindFinal completes the match when a partial match reaches it.
	kindFinal
	// kindStop discards the partial match that reaches it: a negative step's
	// event occurred.
	kindStop
	// kindPending is a trailing NotFollowedBy: the partial match completes
	// when its window passes.
	kindPending
)

// transition is an edge of the NFA, FlinkCEP's StateTransition: take consumes
// the event into the buffer and moves to `to`; ignore skips the event and
// moves to `to`; proceed moves to `to` without consuming the event and goes on
// with the same event from there (an epsilon edge guarded by that event).
type transition struct {
	act action
	to  int32
	g   *guard
}

type action uint8

const (
	actTake action = iota
	actIgnore
	actProceed
)

// finalState is the index of the final state: build creates it first.
const finalState int32 = 0

// maxTimes bounds a times quantifier: each occurrence is an NFA state.
const maxTimes = 10_000

var skipNames = [...]string{"no_skip", "skip_to_next", "skip_past_last_event", "skip_to_first", "skip_to_last"}

// Compile validates p and builds its NFA.
//
// The NFA has FlinkCEP's shape: it is built from the last step backwards,
// exactly as Flink's NFACompiler does it (without group patterns and per-step
// windows, which Pattern cannot express), so that quantifiers, optional steps,
// greedy, until and negations combine the way they do in Flink.
//
// Errors name the step and the rule broken, for example
// `step "b": a negative step cannot have a quantifier` or
// `skip_to_first: unknown step "x"`.
func Compile(p Pattern, opts ...Option) (*NFA, error) {
	cfg := config{maxPartials: DefaultMaxPartials}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.maxPartials < 1 {
		return nil, fmt.Errorf("max partials %d: must be at least 1", cfg.maxPartials)
	}
	steps, err := validate(p)
	if err != nil {
		return nil, err
	}
	n := &NFA{
		steps:       len(steps),
		within:      p.Within,
		skip:        p.Skip.Kind,
		skipStep:    -1,
		maxPartials: cfg.maxPartials,
	}
	if p.Skip.Kind == SkipToFirst || p.Skip.Kind == SkipToLast {
		n.skipStep = slices.IndexFunc(steps, func(s Step) bool { return s.Name == p.Skip.Step })
	}
	c := compiler{steps: steps, within: p.Within, stops: map[int]int32{}, untilExit: map[int32]int32{}}
	n.start = c.build()
	n.states = c.states
	n.work.ctx.memo = make([]uint8, 2*n.steps)
	return n, nil
}

// validate checks p and returns its steps normalised: the zero Min and Max
// become 1, 1 and Min 0 becomes Optional with Min 1.
func validate(p Pattern) ([]Step, error) {
	if len(p.Steps) == 0 {
		return nil, errors.New("a pattern needs at least one step")
	}
	if p.Within < 0 {
		return nil, fmt.Errorf("within %d: must not be negative", p.Within)
	}
	steps := slices.Clone(p.Steps)
	seen := make(map[string]bool, len(steps))
	for i := range steps {
		s := &steps[i]
		if s.Name == "" {
			return nil, fmt.Errorf("step %d: empty name", i)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("step %q: duplicate name", s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Contiguity > Any:
			return nil, fmt.Errorf("step %q: unknown contiguity %d", s.Name, s.Contiguity)
		case s.Inner > Any:
			return nil, fmt.Errorf("step %q: unknown inner contiguity %d", s.Name, s.Inner)
		case s.Not > NotFollowedBy:
			return nil, fmt.Errorf("step %q: unknown negation %d", s.Name, s.Not)
		}
		if s.Min == 0 && s.Max == 0 {
			s.Min, s.Max = 1, 1
		}
		switch {
		case s.Min < 0:
			return nil, fmt.Errorf("step %q: min %d is negative", s.Name, s.Min)
		case s.Max == 0 || s.Max < -1:
			return nil, fmt.Errorf("step %q: max %d must be positive or -1 (unbounded)", s.Name, s.Max)
		case s.Max != -1 && s.Min > s.Max:
			return nil, fmt.Errorf("step %q: min %d > max %d", s.Name, s.Min, s.Max)
		case s.Min > maxTimes || s.Max > maxTimes:
			return nil, fmt.Errorf("step %q: times above %d are not supported", s.Name, maxTimes)
		}
		quantified := s.Min != 1 || s.Max != 1
		if s.Min == 0 {
			s.Optional, s.Min = true, 1
		}
		if s.Not != None {
			switch {
			case i == 0:
				return nil, errors.New("a pattern cannot start with a negative step")
			case quantified || s.Optional || s.Greedy || s.Until != nil || s.Inner != Relaxed:
				return nil, fmt.Errorf("step %q: a negative step cannot have a quantifier", s.Name)
			case s.Contiguity != Relaxed:
				return nil, fmt.Errorf("step %q: a negative step takes its contiguity from not", s.Name)
			case steps[i-1].Not != None:
				return nil, fmt.Errorf("step %q: a negative step cannot follow another negative step", s.Name)
			case steps[i-1].Optional:
				return nil, fmt.Errorf("step %q: an optional step cannot precede a negative step", steps[i-1].Name)
			}
			continue
		}
		switch {
		case s.Until != nil && s.Max != -1:
			return nil, fmt.Errorf("step %q: until needs a looping step", s.Name)
		case s.Greedy && !quantified:
			return nil, fmt.Errorf("step %q: greedy needs a quantifier (times, one_or_more or times_or_more)", s.Name)
		case s.Inner != Relaxed && !quantified:
			return nil, fmt.Errorf("step %q: consecutive and allow_combinations need a quantifier", s.Name)
		case s.Optional && i > 0 && steps[i-1].Greedy:
			return nil, fmt.Errorf("step %q: an optional step cannot follow a greedy step", s.Name)
		}
	}
	if steps[len(steps)-1].Not == NotFollowedBy && p.Within == 0 {
		return nil, errors.New("a pattern cannot end with not: relaxed without within")
	}
	switch k := p.Skip.Kind; k {
	case NoSkip, SkipToNext, SkipPastLastEvent:
		if p.Skip.Step != "" {
			return nil, fmt.Errorf("%s: takes no step (got %q)", skipNames[k], p.Skip.Step)
		}
	case SkipToFirst, SkipToLast:
		if p.Skip.Step == "" {
			return nil, fmt.Errorf("%s: needs a step", skipNames[k])
		}
		if !seen[p.Skip.Step] {
			return nil, fmt.Errorf("%s: unknown step %q", skipNames[k], p.Skip.Step)
		}
	default:
		return nil, fmt.Errorf("unknown skip strategy %d", k)
	}
	return steps, nil
}

// compiler builds the NFA graph. Its methods mirror FlinkCEP's
// NFACompiler.NFAFactoryCompiler (convertPattern, createTimesState,
// createSingletonState, createLooping, copyWithoutTransitiveNots, ...).
type compiler struct {
	steps  []Step
	within int64
	states []nstate
	stops  map[int]int32 // negative step -> its stop state
	// untilExit maps the sink of a greedy loop with until to the copy of it
	// taken before the greedy guard was added (Flink's originalStateMap): the
	// loop leaves through the copy when until accepts the event.
	untilExit map[int32]int32
}

func (c *compiler) newState(kind stateKind, step int) int32 {
	c.states = append(c.states, nstate{kind: kind, step: int32(step)})
	return int32(len(c.states) - 1)
}

func (c *compiler) add(from int32, act action, to int32, g *guard) {
	if g.op == opFalse {
		return
	}
	c.states[from].trans = append(c.states[from].trans, transition{act: act, to: to, g: g})
}

// cond is step i's condition; its memo index is 2i.
func (c *compiler) cond(i int) *guard { return condGuard(c.steps[i].Where, 2*i) }

// until is step i's until condition, nil if it has none; its memo index is
// 2i+1.
func (c *compiler) until(i int) *guard {
	if c.steps[i].Until == nil {
		return nil
	}
	return condGuard(c.steps[i].Until, 2*i+1)
}

// ignore is the guard of the edge that skips an event under contiguity k:
// never (strict), when the step does not match it (relaxed), always (any).
func (c *compiler) ignore(i int, k Contiguity) *guard {
	switch k {
	case Strict:
		return guardFalse
	case Any:
		return guardTrue
	}
	return notGuard(c.cond(i))
}

// withUntil makes g false where until holds (Flink's extendWithUntilCondition).
func withUntil(g, until *guard) *guard {
	if until == nil || g.op == opFalse {
		return g
	}
	return andGuard(notGuard(until), g)
}

func (c *compiler) stop(step int) int32 {
	s, ok := c.stops[step]
	if !ok {
		s = c.newState(kindStop, step)
		c.stops[step] = s
	}
	return s
}

// build creates the states from the last step to the first and returns the
// start state.
func (c *compiler) build() int32 {
	sink := c.newState(kindFinal, -1) // finalState
	for i := len(c.steps) - 1; i > 0; i-- {
		switch c.steps[i].Not {
		case NotFollowedBy:
			// In the middle, a NotFollowedBy becomes stop edges on the
			// states after it (addStopStates). At the end it is a pending
			// state that waits for the window to pass.
			if c.within > 0 && c.states[sink].kind == kindFinal {
				p := c.newState(kindPending, i)
				c.add(p, actProceed, c.stop(i), c.cond(i))
				c.add(p, actIgnore, p, notGuard(c.cond(i)))
				sink = p
			}
		case NotNext:
			nn := c.newState(kindNormal, i)
			if c.states[sink].kind == kindFinal {
				// An ignore edge, not a proceed: a trailing NotNext
				// completes on the next event, once that event is known
				// not to match.
				c.add(nn, actIgnore, sink, notGuard(c.cond(i)))
			} else {
				c.add(nn, actProceed, sink, notGuard(c.cond(i)))
			}
			c.add(nn, actProceed, c.stop(i), c.cond(i))
			sink = nn
		default:
			sink = c.convert(i, sink)
		}
	}
	return c.convert(0, sink)
}

// convert creates the states of positive step i in front of sink and returns
// its first state.
func (c *compiler) convert(i int, sink int32) int32 {
	s := c.steps[i]
	var first int32
	if s.Max == -1 {
		loop := c.looping(i, c.withoutNots(i, sink))
		first = c.times(i, loop, sink, s.Min, s.Min)
	} else {
		first = c.times(i, sink, sink, s.Min, s.Max)
	}
	c.addStopStates(i, first)
	return first
}

// times creates the chain of states of step i: from-1 mandatory states after
// the first one, then to-from optional ones that may proceed to proceed.
func (c *compiler) times(i int, sink, proceed int32, from, to int) int32 {
	s := c.steps[i]
	until := c.until(i)
	take := withUntil(c.cond(i), until)
	inner := withUntil(c.ignore(i, s.Inner), until)
	if s.Greedy && from != to {
		c.greedy(sink, take)
	}
	last := sink
	for k := from; k < to; k++ {
		last = c.singleton(i, last, proceed, take, inner, true)
		c.addStopToLooping(i, last)
	}
	for k := 0; k < from-1; k++ {
		last = c.singleton(i, last, -1, take, inner, false)
		c.addStopToLooping(i, last)
	}
	return c.singleton(i, last, proceed, take, c.ignore(i, s.Contiguity), s.Optional)
}

// singleton creates a state that takes one event of step i into sink. An
// optional one may proceed to proceed, and skips events through a separate
// state without that proceed edge, so that each way of leaving the step is
// created once.
func (c *compiler) singleton(i int, sink, proceed int32, take, ignore *guard, optional bool) int32 {
	st := c.newState(kindNormal, i)
	target := c.withoutNots(i, sink)
	c.add(st, actTake, target, take)
	if optional {
		if until := c.until(i); c.steps[i].Greedy && until != nil {
			exit := proceed
			if e, ok := c.untilExit[proceed]; ok {
				exit = e
			}
			c.add(st, actProceed, exit, until)
			c.add(st, actProceed, proceed, notGuard(until))
		} else {
			c.add(st, actProceed, proceed, guardTrue)
		}
	}
	if ignore.op != opFalse {
		if optional {
			ign := c.newState(kindNormal, i)
			c.add(ign, actTake, target, take)
			c.add(ign, actIgnore, ign, ignore)
			c.addStopStates(i, ign)
			c.add(st, actIgnore, ign, ignore)
		} else {
			c.add(st, actIgnore, st, ignore)
		}
	}
	return st
}

// looping creates the state of a looping step after its minimum: it takes
// more events, or proceeds to sink.
func (c *compiler) looping(i int, sink int32) int32 {
	s := c.steps[i]
	until := c.until(i)
	take := withUntil(c.cond(i), until)
	ignore := withUntil(c.ignore(i, s.Inner), until)
	loop := c.newState(kindNormal, i)
	if s.Greedy {
		if until != nil {
			exit := c.copyState(sink)
			c.add(loop, actProceed, exit, until)
			c.untilExit[sink] = exit
			c.add(loop, actProceed, sink, notGuard(until))
		} else {
			c.add(loop, actProceed, sink, guardTrue)
		}
		c.greedy(sink, c.cond(i))
	} else {
		c.add(loop, actProceed, sink, guardTrue)
	}
	c.add(loop, actTake, loop, take)
	c.addStopToLooping(i, loop)
	if ignore.op != opFalse {
		ign := c.newState(kindNormal, i)
		c.add(ign, actTake, loop, take)
		c.add(ign, actIgnore, ign, ignore)
		c.add(loop, actIgnore, ign, ignore)
		c.addStopToLooping(i, ign)
	}
	return loop
}

// greedy makes every edge of s (the state after a greedy step) refuse events
// the greedy step can take (Flink's updateWithGreedyCondition): no branch
// leaves the loop while the loop can still take the event.
func (c *compiler) greedy(s int32, take *guard) {
	tr := c.states[s].trans
	for k := range tr {
		tr[k].g = andGuard(tr[k].g, notGuard(take))
	}
	c.states[s].trans = slices.DeleteFunc(tr, func(t transition) bool { return t.g.op == opFalse })
}

// nots returns the NotFollowedBy steps that still apply at step i: the one
// right before it, and those before optional steps that may be skipped.
func (c *compiler) nots(i int) []int {
	var out []int
	for j := i; j > 0 && (c.steps[j-1].Optional || c.steps[j-1].Not == NotFollowedBy); {
		j--
		if c.steps[j].Not == NotFollowedBy {
			out = append(out, j)
		}
	}
	return out
}

// addStopStates lets st be discarded by the NotFollowedBys that apply at step i.
func (c *compiler) addStopStates(i int, st int32) {
	for _, j := range c.nots(i) {
		c.add(st, actProceed, c.stop(j), c.cond(j))
	}
}

// addStopToLooping lets st, a state inside step i, be discarded by a
// NotFollowedBy right after step i.
func (c *compiler) addStopToLooping(i int, st int32) {
	if j := i + 1; j < len(c.steps) && c.steps[j].Not == NotFollowedBy {
		c.add(st, actProceed, c.stop(j), c.cond(j))
	}
}

// withoutNots returns sink, or, when step i is optional and NotFollowedBys
// apply before it, a copy of sink without their stop edges: once the optional
// step took an event, those negations no longer apply (Flink's
// copyWithoutTransitiveNots).
func (c *compiler) withoutNots(i int, sink int32) int32 {
	nots := c.nots(i)
	if len(nots) == 0 || !c.steps[i].Optional {
		return sink
	}
	cp := c.newState(c.states[sink].kind, int(c.states[sink].step))
	for _, t := range c.states[sink].trans {
		to := t.to
		switch {
		case t.act != actProceed:
			if to == sink {
				to = cp
			}
		case c.states[to].kind == kindStop:
			if slices.Contains(nots, int(c.states[to].step)) {
				continue
			}
		default:
			to = c.withoutNots(i, to)
		}
		c.add(cp, t.act, to, t.g)
	}
	return cp
}

// copyState copies s with its edges (Flink's copy).
func (c *compiler) copyState(s int32) int32 {
	cp := c.newState(c.states[s].kind, int(c.states[s].step))
	for _, t := range c.states[s].trans {
		to := t.to
		if to == s {
			to = cp
		}
		c.add(cp, t.act, to, t.g)
	}
	return cp
}
