package rules

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// Worst-case inputs of the fuzz target: every field at its bound.
const (
	fuzzFieldBytes = 64
	fuzzHistory    = 6
	fuzzRecord     = 512
)

// exprGen renders a random expression twice from the same choices: plain,
// for Load, and instrumented, each generated node wrapped in _tick() so that
// running it counts its evaluations and the sizes of the values they make.
type exprGen struct {
	data []byte
	i    int
}

func (g *exprGen) pick(n int) int {
	if g.i >= len(g.data) {
		return 0
	}
	g.i++
	return int(g.data[g.i-1]) % n
}

func tick(s string) string { return "_tick(" + s + ")" }

// leaf wraps a value that is read or handed on, not made: it counts one
// evaluation.
func leaf(s string) string { return "_leaf(" + s + ")" }

// gen returns an expression of a value (plain, instrumented); pred is true
// inside a predicate, where # is an element.
func (g *exprGen) gen(depth int, pred bool) (string, string) {
	leaves := []string{"n", "s", "l", "1", `"ab"`}
	if pred {
		leaves = append(leaves, "#", "#.s", "#.n")
	}
	if depth <= 0 {
		x := leaves[g.pick(len(leaves))]
		return x, leaf(x)
	}
	unary := []string{"len(%s)", "upper(%s)", `split(%s, "a")`, `join(%s, ",")`, "toJSON(%s)", "string(%s)",
		"uniq(%s)", "sort(%s)", `%s matches "a+b"`, `%s contains "x"`, "reverse(%s)", "sum(%s)", "!%s"}
	binary := []string{"%s == %s", "%s + %s", "%s in %s", "%s < %s", "%s && %s", "concat(%s, %s)"}
	loops := []string{"map(%s, %s)", "filter(%s, %s)", "all(%s, %s)", "count(%s, %s)", "any(%s, %s)", "sortBy(%s, %s)"}
	switch g.pick(6) {
	case 0:
		x := leaves[g.pick(len(leaves))]
		return x, leaf(x)
	case 1:
		f := unary[g.pick(len(unary))]
		p, i := g.gen(depth-1, pred)
		return fmt.Sprintf(f, p), tick(fmt.Sprintf(f, i))
	case 2:
		f := binary[g.pick(len(binary))]
		p1, i1 := g.gen(depth-1, pred)
		p2, i2 := g.gen(depth-1, pred)
		wrap := leaf // an operator that hands on one of its operands makes nothing
		if f == "%s + %s" || strings.HasPrefix(f, "concat") {
			wrap = tick
		}
		return fmt.Sprintf(f, p1, p2), wrap(fmt.Sprintf(f, i1, i2))
	case 3:
		f := loops[g.pick(len(loops))]
		c1, c2 := g.collection(depth-1, pred)
		p, i := g.gen(depth-1, true)
		return fmt.Sprintf(f, c1, p), tick(fmt.Sprintf(f, c2, i))
	case 4:
		if !pred { // history() is refused inside predicates anyway
			return `history("tx", "1h")`, leaf("H")
		}
		fallthrough
	default:
		lo, hi := g.pick(5), g.pick(40)
		r := fmt.Sprintf("%d..%d", lo, hi)
		return r, tick(r)
	}
}

func (g *exprGen) collection(depth int, pred bool) (string, string) {
	if g.pick(3) == 0 {
		return g.gen(depth, pred)
	}
	if !pred && g.pick(2) == 0 {
		return `history("tx", "1h")`, leaf("H")
	}
	return "l", leaf("l")
}

// worstEvent is an event whose fields are as large as the fuzz bounds allow.
func worstEvent() map[string]any {
	l := make([]any, fuzzFieldBytes/2) // "1," per element
	for i := range l {
		l[i] = 1.0
	}
	return map[string]any{"s": strings.Repeat("a", fuzzFieldBytes), "n": 1.0, "l": l}
}

// work is what the instrumented run counts for one value: one evaluation,
// plus its size (a string by the 64 bytes, a list or map by the four
// elements: the cheapest a builtin makes them, a range), which bounds the
// work of the builtin that made it.
func work(v any) float64 {
	switch x := v.(type) {
	case string:
		return 1 + float64(len(x))/64
	case []any:
		return 1 + float64(len(x))/4
	case map[string]any:
		return 1 + float64(len(x))/4
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map {
		return 1 + float64(rv.Len())/4
	}
	return 1
}

// FuzzCostBound holds the cost estimate to what an accepted expression does:
// run on worst-case inputs (every field and history at its bound), the work
// it is counted to do never exceeds its estimate. The count is independent of
// the estimator: every node evaluation, inside loops too, plus the size of
// every value made.
func FuzzCostBound(f *testing.F) {
	for _, seed := range []string{"\x03\x00\x01\x00", "\x02\x03\x01\x05\x01\x02", "\x03\x01\x02\x03\x04\x05\x06", "\x01\x06\x03\x02\x00\x01", "\x05\x02\x27"} {
		f.Add([]byte(seed))
	}
	doc := "streams:\n  tx: {key: u, time: ts, id: id, decide: true, max_history: %d, max_field_bytes: %d}\n" +
		"rules:\n  r: {stream: tx, action: block, when: '%s != nil'}\nlimits: {cost: %d}\n"
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &exprGen{data: data}
		plain, instrumented := g.gen(3, false)
		src := fmt.Sprintf(doc, fuzzHistory, fuzzFieldBytes, strings.ReplaceAll(plain, "'", "''"), MaxCostBudget)
		// Without expr's optimizer, so that the estimate is of the tree the
		// instrumented run executes (its _tick calls stop constant folding).
		unoptimized := loadOptionFunc(func(c *compiler) { c.rs.noOptimize = true })
		rs, err := Load([]byte(src), Features(false), MaxRecordBytes(fuzzRecord), unoptimized)
		if err != nil {
			return // refused: nothing to hold it to
		}
		c := &compiler{rs: rs, doc: rs.Doc}
		prog, _, err := c.compile(&rs.Rules[0].when, &Context{})
		if err != nil {
			t.Fatal(err)
		}
		_, est := c.estimateCost(&rs.Rules[0].when, prog.Node())

		var counted float64
		ev := worstEvent()
		hist := make([]any, fuzzHistory)
		for i := range hist {
			hist[i] = worstEvent()
		}
		env := map[string]any{"s": ev["s"], "n": ev["n"], "l": ev["l"], "H": hist}
		run, err := expr.Compile(instrumented, expr.Env(env), expr.AllowUndefinedVariables(), expr.Optimize(false),
			expr.Function("_tick", func(args ...any) (any, error) {
				counted += work(args[0])
				return args[0], nil
			}),
			expr.Function("_leaf", func(args ...any) (any, error) {
				counted++
				return args[0], nil
			}))
		if err != nil {
			return // a form only Vigil's compiler accepts (typed differently): not comparable
		}
		var m vm.VM
		m.MemoryBudget = 1 << 30
		_, _ = m.Run(run, env) // a runtime type error ends it early: still within the bound
		if counted > est.cost {
			t.Errorf("%s\nestimated %s units, counted %s on worst-case inputs", plain, units(est.cost), units(counted))
		}
	})
}
