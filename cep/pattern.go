package cep

// Event is one input event as the NFA sees it. Seq is the arrival order
// (unique, increasing per key); Value is opaque to cep.
//
// cep keeps pointers to the Events it is given for as long as a partial match
// refers to them and never modifies them: the caller must not modify an Event
// after handing it to State.Process.
type Event struct {
	Time  int64 // event time, ms
	Seq   uint64
	Value any
}

// Partial gives a condition read access to the events a partial match has
// taken so far.
type Partial interface {
	// Events returns the events taken by step i (by index in Pattern.Steps), in
	// order; for a looping step, those taken so far on this branch. The event
	// being decided is not among them. It must not allocate more than the
	// result slice.
	//
	// The slice is valid until the condition returns: a condition that keeps
	// it must copy it. An out-of-range i, a step not reached yet and the first
	// step's condition all get an empty slice.
	Events(step int) []*Event
}

// Condition decides whether ev can be taken (or, for Until, stops a loop). p is
// never nil; for the first step it holds no events.
//
// Conditions run on the goroutine that calls State.Process, once per event
// and open partial match that tests them (the result is reused by every edge
// of that partial match), so they must be pure: the same event and the same
// partial match give the same answer.
type Condition func(ev *Event, p Partial) bool

// Contiguity says which events may come between two events of a match.
type Contiguity uint8

const (
	// Relaxed (followedBy) skips events that do not match, but takes the
	// first one that does: it cannot skip a matching event.
	Relaxed Contiguity = iota
	// Strict (next) needs the matching event to come right after the previous
	// one; any other event in between ends the partial match.
	Strict
	// Any (followedByAny) may skip any event, matching or not: every later
	// matching event starts an alternative branch.
	Any
)

// Negation marks a negative step: one that must not occur.
type Negation uint8

const (
	// None is a positive step.
	None Negation = iota
	// NotNext (not: strict) discards the partial match when the event right
	// after the previous step's event matches.
	NotNext
	// NotFollowedBy (not: relaxed) discards the partial match when a matching
	// event occurs anywhere between the previous step and the next one. As
	// the last step it needs Pattern.Within, and the match completes when the
	// window passes without a matching event.
	NotFollowedBy
)

// Step is one named element of a pattern sequence.
//
// Quantifiers: a plain step is Min 1, Max 1 (the zero Min and Max mean the
// same); times: n is n,n; times: [n, m] is n,m; one_or_more is 1,-1;
// times_or_more: n is n,-1. Max -1 means unbounded (a looping step). Min 0 is
// FlinkCEP's times(0, m): the step becomes Optional with Min 1.
type Step struct {
	Name     string
	Where    Condition // nil means true
	Min, Max int       // occurrences; Max == -1: unbounded
	Optional bool      // the step may be skipped
	// Greedy makes a quantified step take as many events as it can: the step
	// after it refuses the events this one accepts.
	Greedy bool
	// Until, on a looping step only, ends the loop: an event it accepts is not
	// taken by the loop (the next step may take it).
	Until Condition
	// Contiguity with the previous step (ignored on the first step). For a
	// quantified step it governs the first occurrence.
	Contiguity Contiguity
	// Inner is the contiguity between occurrences of a quantified step:
	// Relaxed (the default), Strict (consecutive) or Any
	// (allow_combinations).
	Inner Contiguity
	Not   Negation
}

// SkipKind is an after-match skip strategy.
type SkipKind uint8

const (
	// NoSkip emits every possible match.
	NoSkip SkipKind = iota
	// SkipToNext discards every partial match that started with the same
	// event as the emitted match.
	SkipToNext
	// SkipPastLastEvent discards every partial match that started before the
	// emitted match ended.
	SkipPastLastEvent
	// SkipToFirst discards every partial match that started before the first
	// event of Skip.Step in the emitted match.
	SkipToFirst
	// SkipToLast discards every partial match that started before the last
	// event of Skip.Step in the emitted match.
	SkipToLast
)

// Skip is an after-match skip strategy; Step names a step for SkipToFirst and
// SkipToLast and is empty otherwise. When the named step has no event in a
// match (an optional step that was skipped), nothing is discarded.
type Skip struct {
	Kind SkipKind
	Step string
}

// Pattern is a sequence of steps over one keyed stream.
type Pattern struct {
	Steps  []Step
	Within int64 // ms; 0 = none. A partial match dies when time - start >= Within.
	Skip   Skip
}

// Match is a completed match: Events[i] are step i's events in order (empty
// for an optional step that was skipped, and for negative steps). Start is the
// time of its first event; End the time of its last event, or Start + Within
// for a match completed by a trailing NotFollowedBy whose window passed.
//
// A Match and its slices belong to whoever receives it.
type Match struct {
	Start, End int64
	Events     [][]*Event
}

// Timeout is a partial match that Within ended before completion (same shape as
// Match; steps not reached are empty). Deadline is Start + Within.
type Timeout struct {
	Start, Deadline int64
	Events          [][]*Event
}

// Option configures Compile.
type Option interface{ apply(*config) }

type config struct {
	maxPartials int
}

type maxPartials int

func (m maxPartials) apply(c *config) { c.maxPartials = int(m) }

// MaxPartials caps the open partial matches of one key (default 10_000). When
// a key goes over the cap, its oldest partial matches (by start) are dropped
// and counted (State.Dropped). Compile refuses n < 1.
func MaxPartials(n int) Option { return maxPartials(n) }

// DefaultMaxPartials is the cap on open partial matches per key when no
// MaxPartials option is given.
const DefaultMaxPartials = 10_000
