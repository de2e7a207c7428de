package rules

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/stream"
)

// Ordering is how a pattern receives its stream's events.
type Ordering uint8

// Orderings. EventTime buffers each key's events and feeds them in time order
// as the watermark passes (an event at or below the watermark is late);
// Arrival feeds them at once, for the lowest latency.
const (
	EventTime Ordering = iota
	Arrival
)

// DefaultMaxPartials caps a pattern's open partial matches per key.
const DefaultMaxPartials = 10_000

// Pattern is a compiled pattern. Its matches are the events of the derived
// stream Derived, named after the pattern.
type Pattern struct {
	Name        string
	Stream      int // the stream it matches over (an input or a derived stream)
	Derived     int // the stream of its matches
	Ordering    Ordering
	Timeouts    bool // emit timed-out partial matches
	Within      int64
	MaxPartials int
	Steps       []string // step names, in order

	spec         cep.Pattern // conditions are bound per task
	where, until []*exprSource
	// matchItems bounds the events of one step's match.<step> list, for the
	// cost bound of step conditions: the largest bounded quantifier, or the
	// stream's max_history when a step loops without a bound.
	matchItems float64
}

// matchBound is Pattern.matchItems for steps over a stream keeping maxHistory events.
func matchBound(steps []StepSpec, maxHistory int) float64 {
	most := 1
	for _, st := range steps {
		switch {
		case st.OneOrMore || st.TimesOrMore != 0:
			return float64(maxHistory)
		case st.Times.Max > most:
			most = st.Times.Max
		}
	}
	return float64(most)
}

// noPattern is Stream.Pattern for an input stream.
const noPattern = -1

// addDerivedStreams gives every pattern a stream of its matches, after the
// input streams, so that rules, windows and patterns can read it.
func (c *compiler) addDerivedStreams(fail func(string, error)) {
	rs, doc := c.rs, c.doc
	for _, name := range sortedNames(doc.Patterns) {
		if _, clash := rs.streamIndex[name]; clash {
			fail("patterns."+name, fmt.Errorf("pattern %q has the name of a stream: a pattern's matches form a stream of its name", name))
			continue
		}
		idx := len(rs.Streams)
		rs.streamIndex[name] = idx
		rs.Streams = append(rs.Streams, &Stream{Name: name, Topic: name, Index: idx, Pattern: len(rs.derivedOrder),
			Join: noJoin, MaxHistory: DefaultMaxHistory})
		rs.derivedOrder = append(rs.derivedOrder, name)
	}
}

var (
	contiguities = map[string]cep.Contiguity{"": cep.Relaxed, "relaxed": cep.Relaxed, "strict": cep.Strict, "any": cep.Any}
	negations    = map[string]cep.Negation{"": cep.None, "strict": cep.NotNext, "relaxed": cep.NotFollowedBy}
	skips        = map[string]cep.SkipKind{"": cep.NoSkip, "no_skip": cep.NoSkip, "skip_to_next": cep.SkipToNext,
		"skip_past_last_event": cep.SkipPastLastEvent, "skip_to_first": cep.SkipToFirst, "skip_to_last": cep.SkipToLast}
)

func (c *compiler) compilePatterns(fail func(string, error)) {
	rs, doc := c.rs, c.doc
	for _, name := range rs.derivedOrder {
		spec, path := doc.Patterns[name], "patterns."+name
		if spec == nil {
			spec = &PatternSpec{}
		}
		p := &Pattern{Name: name, Derived: rs.streamIndex[name], MaxPartials: spec.MaxPartials, Timeouts: spec.Timeouts,
			Within: int64(spec.Within)}
		rs.Patterns = append(rs.Patterns, p)
		idx, ok := rs.streamIndex[spec.Stream]
		if !ok {
			fail(path+".stream", unknownStream(spec.Stream, rs))
			continue
		}
		p.Stream = idx
		switch spec.Ordering {
		case "", "event_time":
			p.Ordering = EventTime
		case "arrival":
			p.Ordering = Arrival
		default:
			fail(path+".ordering", fmt.Errorf("ordering must be event_time or arrival, not %q", spec.Ordering))
		}
		if p.MaxPartials == 0 {
			p.MaxPartials = DefaultMaxPartials
		} else if p.MaxPartials < 0 {
			fail(path+".max_partials", errors.New("must be positive"))
		}
		if spec.Within < 0 {
			fail(path+".within", errors.New("must not be negative"))
		}
		if len(spec.Steps) == 0 {
			fail(path+".steps", errors.New("a pattern needs at least one step"))
			continue
		}
		p.spec = cep.Pattern{Within: p.Within}
		skip, ok := skips[spec.AfterMatch.Kind]
		if !ok {
			skip = cep.NoSkip
		}
		p.spec.Skip = cep.Skip{Kind: skip, Step: spec.AfterMatch.Step}
		p.matchItems = matchBound(spec.Steps, rs.Streams[idx].MaxHistory)
		valid := true
		for i, st := range spec.Steps {
			spath := fmt.Sprintf("%s.steps[%d]", path, i)
			step, err := c.compileStep(p, st, spath, idx)
			if err != nil {
				fail(spath, err)
				valid = false
			}
			p.Steps = append(p.Steps, st.Name)
			p.spec.Steps = append(p.spec.Steps, step)
		}
		if !valid {
			continue
		}
		if _, err := cep.Compile(p.bind(func(*exprSource) cep.Condition { return func(*cep.Event, cep.Partial) bool { return false } })); err != nil {
			fail(path, err)
		}
		rs.Streams[idx].Patterns = append(rs.Streams[idx].Patterns, len(rs.Patterns)-1)
	}
}

func (c *compiler) compileStep(p *Pattern, st StepSpec, path string, streamIdx int) (cep.Step, error) {
	if err := checkName(st.Name); err != nil {
		return cep.Step{}, fmt.Errorf("step name: %w", err)
	}
	step := cep.Step{Name: st.Name, Min: 1, Max: 1, Optional: st.Optional, Greedy: st.Greedy}
	quantifiers := 0
	if st.Times != (TimesSpec{}) {
		quantifiers++
		step.Min, step.Max = st.Times.Min, st.Times.Max
		if step.Min == 0 { // times: [0, m] is an optional [1, m], as in Flink
			step.Min, step.Optional = 1, true
		}
	}
	if st.OneOrMore {
		quantifiers++
		step.Min, step.Max = 1, -1
	}
	if st.TimesOrMore != 0 {
		quantifiers++
		if st.TimesOrMore < 1 {
			return step, errors.New("times_or_more must be at least 1")
		}
		step.Min, step.Max = st.TimesOrMore, -1
	}
	if quantifiers > 1 {
		return step, errors.New("use one of times, one_or_more and times_or_more")
	}
	var ok bool
	if step.Contiguity, ok = contiguities[st.Contiguity]; !ok {
		return step, fmt.Errorf("contiguity must be strict, relaxed or any, not %q", st.Contiguity)
	}
	if step.Not, ok = negations[st.Not]; !ok {
		return step, fmt.Errorf("not must be strict or relaxed, not %q", st.Not)
	}
	switch {
	case st.Consecutive && st.AllowCombinations:
		return step, errors.New("consecutive and allow_combinations exclude each other")
	case st.Consecutive:
		step.Inner = cep.Strict
	case st.AllowCombinations:
		step.Inner = cep.Any
	}
	if st.Where == "" {
		return step, errors.New("where is required: the condition an event must meet to be taken by the step")
	}
	where := &exprSource{src: string(st.Where), path: path + ".where", scope: scopeStep, stream: streamIdx, kind: reflect.Bool, matchItems: p.matchItems}
	if _, _, err := c.compile(where, &Context{}); err != nil {
		return step, err
	}
	p.where = append(p.where, where)
	var until *exprSource
	if st.Until != "" {
		until = &exprSource{src: string(st.Until), path: path + ".until", scope: scopeStep, stream: streamIdx, kind: reflect.Bool, matchItems: p.matchItems}
		if _, _, err := c.compile(until, &Context{}); err != nil {
			return step, err
		}
	}
	p.until = append(p.until, until)
	return step, nil
}

// bind returns the pattern with conditions made by cond.
func (p *Pattern) bind(cond func(*exprSource) cep.Condition) cep.Pattern {
	out := p.spec
	out.Steps = append([]cep.Step(nil), p.spec.Steps...)
	for i := range out.Steps {
		out.Steps[i].Where = cond(p.where[i])
		if p.until[i] != nil {
			out.Steps[i].Until = cond(p.until[i])
		}
	}
	return out
}

// MatchEvent builds the event of a pattern's derived stream for a match: the
// fields rules and windows read (pattern, key, start, end, and the events of
// each step by name).
func (p *Pattern) MatchEvent(key string, start, end int64, events [][]*cep.Event) map[string]any {
	byStep := make(map[string]any, len(p.Steps))
	for i, name := range p.Steps {
		list := make([]any, len(events[i]))
		for j, ev := range events[i] {
			list[j] = ev.Value.(*stream.Event).Value
		}
		byStep[name] = list
	}
	return map[string]any{"pattern": p.Name, "key": key, "start": float64(start), "end": float64(end), "events": byStep}
}
