package rules

import (
	"errors"
	"fmt"
	"reflect"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/join"
)

// JoinSpec declares an interval join (docs/design.md "Interval joins"): per key,
// a left and a right event pair up when right.time - left.time is within
// Between and Where holds.
type JoinSpec struct {
	Left           string   `yaml:"left" json:"left"`
	Right          string   `yaml:"right" json:"right"`
	Between        Interval `yaml:"between" json:"between"`
	LowerExclusive bool     `yaml:"lower_exclusive" json:"lower_exclusive,omitempty"`
	UpperExclusive bool     `yaml:"upper_exclusive" json:"upper_exclusive,omitempty"`
	Where          Expr     `yaml:"where" json:"where,omitempty"`
	Select         Expr     `yaml:"select" json:"select,omitempty"`
}

// Interval is a join's [lower, upper], written as two durations.
type Interval struct {
	Lower, Upper Duration
	Set          bool
}

func (iv *Interval) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.SequenceNode || len(n.Content) != 2 {
		d.fail(n, path, errors.New(`between must be [lower, upper], e.g. ["-5m", "5m"]`))
		return
	}
	lo, err1 := parseDuration(n.Content[0].Value)
	hi, err2 := parseDuration(n.Content[1].Value)
	if err := errors.Join(err1, err2); err != nil {
		d.fail(n, path, fmt.Errorf("between: %w", err))
		return
	}
	iv.Lower, iv.Upper, iv.Set = lo, hi, true
}

// Join is a compiled interval join. Its pairs are the events of the derived
// stream Derived, named after the join.
type Join struct {
	Name        string
	Left, Right int // streams
	Derived     int
	Spec        join.Spec
	where       *exprSource
	sel         *exprSource
}

// noJoin is Stream.Join for a stream that is not a join's.
const noJoin = -1

// addJoinStreams gives every join a stream of its pairs.
func (c *compiler) addJoinStreams(fail func(string, error)) {
	rs := c.rs
	for _, name := range sortedNames(c.doc.Joins) {
		if _, clash := rs.streamIndex[name]; clash {
			fail("joins."+name, fmt.Errorf("join %q has the name of a stream or pattern: a join's pairs form a stream of its name", name))
			continue
		}
		idx := len(rs.Streams)
		rs.streamIndex[name] = idx
		rs.Streams = append(rs.Streams, &Stream{Name: name, Topic: name, Index: idx, Pattern: noPattern,
			Join: len(rs.joinOrder), MaxHistory: DefaultMaxHistory})
		rs.joinOrder = append(rs.joinOrder, name)
	}
}

func (c *compiler) compileJoins(fail func(string, error)) {
	rs := c.rs
	for _, name := range rs.joinOrder {
		spec, path := c.doc.Joins[name], "joins."+name
		if spec == nil {
			spec = &JoinSpec{}
		}
		j := &Join{Name: name, Derived: rs.streamIndex[name]}
		rs.Joins = append(rs.Joins, j)
		var ok1, ok2 bool
		if j.Left, ok1 = rs.streamIndex[spec.Left]; !ok1 {
			fail(path+".left", unknownStream(spec.Left, rs))
		}
		if j.Right, ok2 = rs.streamIndex[spec.Right]; !ok2 {
			fail(path+".right", unknownStream(spec.Right, rs))
		}
		if !spec.Between.Set {
			fail(path+".between", errors.New(`between is required: [lower, upper] of right.time - left.time, e.g. ["0s", "5m"]`))
		}
		j.Spec = join.Spec{Lower: int64(spec.Between.Lower), Upper: int64(spec.Between.Upper),
			LowerExclusive: spec.LowerExclusive, UpperExclusive: spec.UpperExclusive}
		if spec.Between.Set {
			if err := j.Spec.Validate(); err != nil {
				fail(path+".between", err)
			}
		}
		if spec.Where != "" {
			j.where = &exprSource{src: string(spec.Where), path: path + ".where", scope: scopeJoin, stream: j.Derived, kind: reflect.Bool}
			if _, _, err := c.compile(j.where, &Context{}); err != nil {
				fail(j.where.path, err)
			}
		}
		if spec.Select != "" {
			j.sel = &exprSource{src: string(spec.Select), path: path + ".select", scope: scopeJoin, stream: j.Derived, kind: reflect.Interface}
			if _, _, err := c.compile(j.sel, &Context{}); err != nil {
				fail(j.sel.path, err)
			}
		}
		if !ok1 || !ok2 {
			continue
		}
		rs.Streams[j.Left].Joins = append(rs.Streams[j.Left].Joins, JoinSide{Join: len(rs.Joins) - 1, Side: join.Left})
		if j.Right != j.Left {
			rs.Streams[j.Right].Joins = append(rs.Streams[j.Right].Joins, JoinSide{Join: len(rs.Joins) - 1, Side: join.Right})
		} else {
			fail(path+".right", errors.New("a join needs two different streams"))
		}
	}
}

// JoinSide says which side of which join a stream feeds.
type JoinSide struct {
	Join int
	Side join.Side
}

// checkCycles refuses derived streams (patterns, joins) that read each other
// in a circle: an output would feed itself.
func (c *compiler) checkCycles(fail func(string, error)) {
	rs := c.rs
	deps := func(s int) []int {
		st := rs.Streams[s]
		switch {
		case st.Pattern != noPattern && st.Pattern < len(rs.Patterns):
			return []int{rs.Patterns[st.Pattern].Stream}
		case st.Join != noJoin && st.Join < len(rs.Joins):
			return []int{rs.Joins[st.Join].Left, rs.Joins[st.Join].Right}
		}
		return nil
	}
	for s, st := range rs.Streams {
		if st.Pattern == noPattern && st.Join == noJoin {
			continue
		}
		seen := map[int]bool{}
		stack := deps(s)
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if d == s {
				kind := "patterns"
				if st.Join != noJoin {
					kind = "joins"
				}
				fail(kind+"."+st.Name, errors.New("patterns and joins read each other's output in a circle"))
				break
			}
			if !seen[d] {
				seen[d] = true
				stack = append(stack, deps(d)...)
			}
		}
	}
}

// JoinValue is the joined event's fields: the select expression's map, or
// {left, right}.
func (e *Evaluator) JoinValue(j int, left, right map[string]any) (map[string]any, error) {
	env := map[string]any{"left": left, "right": right}
	p := e.joinSel[j]
	if p.src == nil {
		return env, nil
	}
	out, err := e.run(p, MapFields(env))
	if err != nil {
		return nil, fmt.Errorf("join %s select: %w", e.rs.Joins[j].Name, err)
	}
	m, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("join %s select must give a map, not %T", e.rs.Joins[j].Name, out)
	}
	return m, nil
}

// JoinWhere reports whether join j's condition holds for a pair.
func (e *Evaluator) JoinWhere(j int, left, right map[string]any) (bool, error) {
	p := e.joinWhere[j]
	if p.src == nil {
		return true, nil
	}
	out, err := e.run(p, MapFields(map[string]any{"left": left, "right": right}))
	if err != nil {
		return false, fmt.Errorf("join %s where: %w", e.rs.Joins[j].Name, err)
	}
	b, _ := out.(bool)
	return b, nil
}
