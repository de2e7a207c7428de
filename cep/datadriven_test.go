package cep

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the conformance scripts in testdata. Commands:
//
//	pattern [within=N] [skip=no_skip|skip_to_next|skip_past_last_event|skip_to_first:S|skip_to_last:S] [cap=N]
//	<one step a line>
//	----
//	ok, or the Compile error
//
//	events
//	<tokens: name or name@time, blank-separated, any number of lines>
//	----
//	<name>: match|timeout ... for each output, sorted per event
//
//	advance <t>|max
//	----
//	@<t>: match|timeout ...
//
// advance max moves time to math.MaxInt64, the end of a bounded input.
//
//	state
//	----
//	len=... buffered=... dropped=... empty=...
//
// A step line is `name: key=value ...` with keys where=C, until=C,
// contiguity=strict|relaxed|any, inner=strict|relaxed|any, times=N or
// times=N,M (M may be -1), not=strict|relaxed and the flags optional and
// greedy. A condition C is alternatives joined by | of terms joined by &: the
// term name:X accepts an event whose name starts with X; total<N accepts an
// event when the numbers ending the names of the events the partial match
// took so far, plus its own, add up to less than N (a condition that reads
// Partial, like FlinkCEP's IterativeCondition example).
//
// An event's time defaults to the previous event's time plus one, starting at
// 1; Seq counts events from 1. A match prints the events of each non-empty step,
// and end=T when it ends at Start+Within (a trailing not: relaxed); a timeout
// prints its deadline. "pattern" starts a new State.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := harness{}
		datadriven.RunTest(t, path, h.run)
	})
}

type harness struct {
	steps []Step
	state *State
	seq   uint64
	time  int64
}

func (h *harness) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "pattern":
		return h.pattern(t, td)
	case "events":
		var out []string
		for _, tok := range strings.Fields(td.Input) {
			name, at, ok := strings.Cut(tok, "@")
			h.time++
			if ok {
				n, err := strconv.ParseInt(at, 10, 64)
				if err != nil {
					td.Fatalf(t, "event %q: %v", tok, err)
				}
				h.time = n
			}
			h.seq++
			var lines []string
			h.state.Process(&Event{Time: h.time, Seq: h.seq, Value: name}, h.onMatch(&lines), h.onTimeout(&lines))
			slices.Sort(lines)
			for _, l := range lines {
				out = append(out, name+": "+l)
			}
		}
		return result(out)
	case "advance":
		if len(td.CmdArgs) != 1 {
			td.Fatalf(t, "advance needs a time")
		}
		arg := td.CmdArgs[0].Key
		at := int64(math.MaxInt64)
		if arg != "max" {
			var err error
			if at, err = strconv.ParseInt(arg, 10, 64); err != nil {
				td.Fatalf(t, "advance: %v", err)
			}
		}
		var lines []string
		h.state.Advance(at, h.onMatch(&lines), h.onTimeout(&lines))
		slices.Sort(lines)
		for i := range lines {
			lines[i] = fmt.Sprintf("@%s: %s", arg, lines[i])
		}
		return result(lines)
	case "state":
		s := h.state
		return fmt.Sprintf("len=%d buffered=%d dropped=%d empty=%t\n", s.Len(), s.Buffered(), s.Dropped(), s.Empty())
	}
	td.Fatalf(t, "unknown command %q", td.Cmd)
	return ""
}

func result(lines []string) string {
	if len(lines) == 0 {
		return "(no output)\n"
	}
	return strings.Join(lines, "\n") + "\n"
}

func (h *harness) pattern(t *testing.T, td *datadriven.TestData) string {
	var p Pattern
	var opts []Option
	for _, a := range td.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		switch a.Key {
		case "within":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				td.Fatalf(t, "within: %v", err)
			}
			p.Within = n
		case "cap":
			n, err := strconv.Atoi(v)
			if err != nil {
				td.Fatalf(t, "cap: %v", err)
			}
			opts = append(opts, MaxPartials(n))
		case "skip":
			kind, step, _ := strings.Cut(v, ":")
			k := slices.Index(skipNames[:], kind)
			if k < 0 {
				td.Fatalf(t, "unknown skip %q", kind)
			}
			p.Skip = Skip{Kind: SkipKind(k), Step: step}
		default:
			td.Fatalf(t, "unknown pattern argument %q", a.Key)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			p.Steps = append(p.Steps, h.parseStep(t, td, line))
		}
	}
	h.steps = p.Steps
	h.seq, h.time = 0, 0
	nfa, err := Compile(p, opts...)
	if err != nil {
		h.state = nil
		return "error: " + err.Error() + "\n"
	}
	h.state = nfa.NewState()
	return "ok\n"
}

var contiguities = map[string]Contiguity{"relaxed": Relaxed, "strict": Strict, "any": Any}

func (h *harness) parseStep(t *testing.T, td *datadriven.TestData, line string) Step {
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		td.Fatalf(t, "step %q: want name: key=value ...", line)
	}
	s := Step{Name: strings.TrimSpace(name)}
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "where":
			s.Where = h.parseCond(t, td, v)
		case "until":
			s.Until = h.parseCond(t, td, v)
		case "contiguity", "inner":
			c, ok := contiguities[v]
			if !ok {
				td.Fatalf(t, "unknown contiguity %q", v)
			}
			if k == "inner" {
				s.Inner = c
			} else {
				s.Contiguity = c
			}
		case "times":
			lo, hi, rng := strings.Cut(v, ",")
			var err error
			if s.Min, err = strconv.Atoi(lo); err != nil {
				td.Fatalf(t, "times: %v", err)
			}
			s.Max = s.Min
			if rng {
				if s.Max, err = strconv.Atoi(hi); err != nil {
					td.Fatalf(t, "times: %v", err)
				}
			}
		case "not":
			switch v {
			case "strict":
				s.Not = NotNext
			case "relaxed":
				s.Not = NotFollowedBy
			default:
				td.Fatalf(t, "unknown not %q", v)
			}
		case "optional":
			s.Optional = true
		case "greedy":
			s.Greedy = true
		default:
			td.Fatalf(t, "unknown step key %q", k)
		}
	}
	return s
}

// parseCond parses the condition language described on TestDataDriven.
func (h *harness) parseCond(t *testing.T, td *datadriven.TestData, src string) Condition {
	var alts [][]Condition
	for _, alt := range strings.Split(src, "|") {
		var terms []Condition
		for _, term := range strings.Split(alt, "&") {
			switch {
			case strings.HasPrefix(term, "name:"):
				prefix := strings.TrimPrefix(term, "name:")
				terms = append(terms, func(ev *Event, _ Partial) bool {
					return strings.HasPrefix(ev.Value.(string), prefix)
				})
			case strings.HasPrefix(term, "total<"):
				limit, err := strconv.Atoi(strings.TrimPrefix(term, "total<"))
				if err != nil {
					td.Fatalf(t, "condition %q: %v", term, err)
				}
				terms = append(terms, func(ev *Event, p Partial) bool {
					sum := number(ev)
					for step := range h.steps {
						for _, e := range p.Events(step) {
							sum += number(e)
						}
					}
					return sum < limit
				})
			default:
				td.Fatalf(t, "unknown condition term %q", term)
			}
		}
		alts = append(alts, terms)
	}
	return func(ev *Event, p Partial) bool {
		for _, terms := range alts {
			if !slices.ContainsFunc(terms, func(c Condition) bool { return !c(ev, p) }) {
				return true
			}
		}
		return false
	}
}

// number is the number that ends an event's name, 0 if none.
func number(ev *Event) int {
	name := ev.Value.(string)
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(name[i:])
	return n
}

func (h *harness) onMatch(lines *[]string) func(Match) {
	return func(m Match) {
		l := "match " + h.format(m.Events)
		if last := lastEvent(m.Events); last == nil || m.End != last.Time {
			l += fmt.Sprintf(" end=%d", m.End)
		}
		*lines = append(*lines, l)
	}
}

func (h *harness) onTimeout(lines *[]string) func(Timeout) {
	return func(to Timeout) {
		*lines = append(*lines, fmt.Sprintf("timeout %s deadline=%d", h.format(to.Events), to.Deadline))
	}
}

func (h *harness) format(events [][]*Event) string {
	var b strings.Builder
	for i, evs := range events {
		if len(evs) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(h.steps[i].Name + "=[")
		for j, e := range evs {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.Value.(string))
		}
		b.WriteByte(']')
	}
	return b.String()
}
