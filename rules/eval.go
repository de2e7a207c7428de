package rules

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/stream"
)

// Evaluator is a ruleset compiled for one task: its programs' functions read
// the task's Context. Not safe for concurrent use; the task goroutine owns it.
type Evaluator struct {
	rs  *Ruleset
	ctx *Context
	vm  vm.VM

	key, time, id []program // per stream
	where         []program // per window
	args          [][]program
	argSame       [][]int     // per window and aggregate: an earlier argument with the same text, or -1
	inlineSlot    []int       // per stream: its inline field's index in DecodeFields, or -1
	when, reason  []program   // per rule
	preds         [][]program // per stream: element predicates of history features
	nfas          []*cep.NFA  // per pattern, conditions bound to this evaluator
	joinWhere     []program   // per join
	joinSel       []program
	enrichKey     []program         // per enrichment
	features      map[int][]program // per rule, compiled by Explain on first use

	partial     cep.Partial // the partial match a step condition is extending
	partialOf   *Pattern
	seq         uint64 // rule evaluations marked on the guard (guard.go)
	condErrors  int64
	lastCondErr string
}

// program is a compiled expression, or the name of the field it reads.
type program struct {
	prog  *vm.Program
	field string
	slot  int // field's index in its stream's DecodeFields, or -1
	src   *exprSource
	fast  fastProg // nil: the VM only
}

// NewEvaluator compiles rs for one task. history serves history() calls: it
// returns the current key's events of a stream within the window before the
// current event's time (the task knows which key and time are current).
func (rs *Ruleset) NewEvaluator(history History) (*Evaluator, error) {
	e := &Evaluator{rs: rs, ctx: &Context{History: history}}
	c := &compiler{rs: rs, doc: rs.Doc}
	fc := fastCompiler{feats: featureFuncs(e.ctx), history: history}
	bind := func(s *exprSource) (program, error) {
		if s == nil || s.src == "" {
			return program{}, nil
		}
		var names []string // where the fields of the events it reads are
		if s.stream >= 0 && s.stream < len(rs.Streams) {
			names = rs.Streams[s.stream].DecodeFields
		}
		if s.field != "" {
			return program{field: s.field, slot: slices.Index(names, s.field), src: s}, nil
		}
		p, _, err := c.compile(s, e.ctx)
		if err != nil {
			return program{}, err
		}
		return program{prog: p, src: s, fast: fc.program(p.Node(), s.kind == reflect.Bool, names)}, nil
	}
	var errs []error
	add := func(p program, err error) program {
		errs = append(errs, err)
		return p
	}
	for _, st := range rs.Streams {
		e.inlineSlot = append(e.inlineSlot, slices.Index(st.DecodeFields, st.inlineField))
		e.key = append(e.key, add(bind(&st.key)))
		e.time = append(e.time, add(bind(&st.time)))
		e.id = append(e.id, add(bind(&st.id)))
		var preds []program
		for _, p := range st.predicates {
			preds = append(preds, add(bind(p)))
		}
		e.preds = append(e.preds, preds)
	}
	for _, w := range rs.Windows {
		e.where = append(e.where, add(bind(w.where)))
		var args []program
		same := make([]int, len(w.args))
		for i, a := range w.args {
			args = append(args, add(bind(a)))
			same[i] = slices.IndexFunc(w.args[:i], func(b *exprSource) bool { return a != nil && b != nil && b.src == a.src })
		}
		e.args, e.argSame = append(e.args, args), append(e.argSame, same)
	}
	for _, r := range rs.Rules {
		e.when = append(e.when, add(bind(&r.when)))
		e.reason = append(e.reason, add(bind(r.reason)))
	}
	for _, j := range rs.Joins {
		e.joinWhere = append(e.joinWhere, add(bind(j.where)))
		e.joinSel = append(e.joinSel, add(bind(j.sel)))
	}
	for _, en := range rs.Enrichments {
		e.enrichKey = append(e.enrichKey, add(bind(&en.key)))
	}
	e.ctx.Match = e.matchValues
	for _, p := range rs.Patterns {
		nfa, err := cep.Compile(p.bind(func(s *exprSource) cep.Condition {
			return e.condition(p, add(bind(s)))
		}), cep.MaxPartials(p.MaxPartials))
		errs = append(errs, err)
		e.nfas = append(e.nfas, nfa)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bind ruleset %s: %w", rs.Version, err)
	}
	return e, nil
}

// NFA returns pattern i's automaton, its conditions bound to this evaluator.
func (e *Evaluator) NFA(i int) *cep.NFA { return e.nfas[i] }

// condition makes a step condition of prog: it evaluates over the event's
// fields, with match reading the partial match being extended. A condition
// that fails counts as false and is counted (ConditionErrors).
func (e *Evaluator) condition(p *Pattern, prog program) cep.Condition {
	return func(ev *cep.Event, partial cep.Partial) bool {
		e.partial, e.partialOf = partial, p
		out, err := e.run(prog, MapFields(ev.Value.(*stream.Event).Value))
		e.partial = nil
		if err != nil {
			e.condErrors++
			e.lastCondErr = fmt.Sprintf("pattern %s: %s: %v", p.Name, prog.src.path, err)
			return false
		}
		b, _ := out.(bool)
		return b
	}
}

// ConditionErrors returns how many step conditions have failed (each counted
// as false), with the last failure.
func (e *Evaluator) ConditionErrors() (n int64, last string) {
	return e.condErrors, e.lastCondErr
}

// matchValues serves match in step conditions: the events taken so far by
// each step of the partial match, as lists of field maps.
func (e *Evaluator) matchValues() map[string]any {
	m := make(map[string]any, len(e.partialOf.Steps))
	for i, name := range e.partialOf.Steps {
		var evs []*cep.Event
		if e.partial != nil {
			evs = e.partial.Events(i)
		}
		list := make([]any, len(evs))
		for j, ev := range evs {
			list[j] = ev.Value.(*stream.Event).Value
		}
		m[name] = list
	}
	return m
}

// SetRecordTime sets what timestamp() returns for the next evaluations.
func (e *Evaluator) SetRecordTime(ts int64, ok bool) {
	e.ctx.RecordTime, e.ctx.HasRecordTime = ts, ok
}

// run evaluates p over the event fields v. expr's VM recovers panics inside
// user code and returns them as errors.
func (e *Evaluator) run(p program, v Fields) (any, error) {
	if p.field != "" {
		return v.get(p.field, p.slot), nil
	}
	if p.fast != nil {
		if out, ok := p.fast(v); ok {
			return out, nil
		}
	}
	out, err := e.vm.Run(p.prog, v.AsMap())
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return nil, errors.New(fe.Message)
		}
		return nil, err
	}
	return out, nil
}

// Key returns the entity key of an event of stream.
func (e *Evaluator) Key(stream int, v Fields) (string, error) {
	p := e.key[stream]
	out, err := e.run(p, v)
	if err != nil {
		return "", fmt.Errorf("key %s: %w", p.src.src, err)
	}
	s, ok := scalarString(out)
	if !ok {
		if out == nil {
			return "", fmt.Errorf("key %s is missing or null", p.src.src)
		}
		return "", fmt.Errorf("key %s must be a string or a number, not %T", p.src.src, out)
	}
	return s, nil
}

// ID returns the id of an event of stream, or ok == false if the stream has none.
func (e *Evaluator) ID(stream int, v Fields) (id string, ok bool, err error) {
	p := e.id[stream]
	if p.src == nil {
		return "", false, nil
	}
	out, err := e.run(p, v)
	if err != nil {
		return "", false, fmt.Errorf("id %s: %w", p.src.src, err)
	}
	s, ok := scalarString(out)
	if !ok || s == "" {
		if out == nil || s == "" {
			return "", false, fmt.Errorf("id %s is missing, null or empty", p.src.src)
		}
		return "", false, fmt.Errorf("id %s must be a string or a number, not %T", p.src.src, out)
	}
	return s, true, nil
}

// Time returns the event time (ms) of an event of stream: a number of epoch
// milliseconds, an RFC 3339 string, or the record timestamp.
func (e *Evaluator) Time(stream int, v Fields) (int64, error) {
	p := e.time[stream]
	out, err := e.run(p, v)
	if err != nil {
		return 0, fmt.Errorf("time %s: %w", p.src.src, err)
	}
	switch t := out.(type) {
	case float64:
		if math.IsNaN(t) || t < -9.2e18 || t > 9.2e18 {
			return 0, fmt.Errorf("time %s: %v is not a time in epoch milliseconds", p.src.src, t)
		}
		return int64(math.Floor(t)), nil
	case int:
		return int64(t), nil
	case int64:
		return t, nil
	case string:
		ts, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return 0, fmt.Errorf("time %s: %q is not an RFC 3339 time", p.src.src, t)
		}
		return ts.UnixMilli(), nil
	case time.Time:
		return t.UnixMilli(), nil
	case nil:
		return 0, fmt.Errorf("time %s is missing or null", p.src.src)
	}
	return 0, fmt.Errorf("time %s must be epoch milliseconds or an RFC 3339 string, not %T", p.src.src, out)
}

// WindowArgs evaluates window w's filter and aggregate arguments over v into
// args (len(args) == len(w.Aggs)). keep is false when the filter rejects v.
func (e *Evaluator) WindowArgs(w int, v Fields, args []any) (keep bool, err error) {
	if p := e.where[w]; p.src != nil {
		out, err := e.run(p, v)
		if err != nil {
			return false, fmt.Errorf("window %s where: %w", e.rs.Windows[w].Name, err)
		}
		if b, _ := out.(bool); !b {
			return false, nil
		}
	}
	for i, p := range e.args[w] {
		if p.src == nil {
			args[i] = nil
			continue
		}
		if j := e.argSame[w][i]; j >= 0 {
			args[i] = args[j] // sum(x) and max(x): x once (expressions are deterministic)
			continue
		}
		out, err := e.run(p, v)
		if err != nil {
			return false, fmt.Errorf("window %s aggregate %s: %w", e.rs.Windows[w].Name, e.rs.Windows[w].Aggs[i].Name, err)
		}
		args[i] = out
	}
	return true, nil
}

// When reports whether rule r matches the event v. With a Guard
// (SetGuard), an evaluation it stopped fails with ErrStopped.
func (e *Evaluator) When(r int, v Fields) (bool, error) {
	g := e.ctx.guard
	if g != nil && g.watched {
		e.begin(r)
	}
	out, err := e.run(e.when[r], v)
	if g != nil && g.stop.Load() != 0 && g.stopped(e.ctx.mark) {
		return false, e.stoppedRule(r) // whatever the VM made of the stop
	}
	if err != nil {
		return false, err
	}
	b, _ := out.(bool)
	return b, nil
}

// Reason returns rule r's reason for the event v ("" when the rule has none).
func (e *Evaluator) Reason(r int, v Fields) (string, error) {
	p := e.reason[r]
	if p.src == nil {
		return "", nil
	}
	out, err := e.run(p, v)
	if stop := e.ctx.check(); stop != nil {
		return "", e.stoppedRule(r)
	}
	if err != nil {
		return "", err
	}
	if s, ok := out.(string); ok {
		return s, nil
	}
	return string(jsonv.Append(nil, out)), nil
}

// Mark evaluates stream's element predicates over a new event: the Mark that
// history keeps next to it, so that features never re-run them, and when
// some failed, their errors (by predicate; History.Failure returns them).
func (e *Evaluator) Mark(stream int, v Fields) (m Mark, errs []string) {
	if f := e.rs.Streams[stream].inlineField; f != "" {
		if s, ok := v.get(f, e.inlineSlot[stream]).(string); ok {
			m.Inline = ShortOf(s)
		}
	}
	for k, p := range e.preds[stream] {
		out, err := e.run(p, v)
		if err != nil {
			if errs == nil {
				errs = make([]string, len(e.preds[stream]))
			}
			m.Failed |= 1 << k
			errs[k] = err.Error()
			continue
		}
		if b, _ := out.(bool); b {
			m.Set |= 1 << k
		}
	}
	return m, errs
}

// scalarString renders keys and ids: strings as they are, integral numbers
// without a fraction.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), true
		}
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}
