package rules

import (
	"cmp"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
)

// fastProg evaluates a compiled expression without expr's VM, for the
// shapes rule conditions and element predicates mostly take: comparisons of
// event fields with constants, history features, and !, && and || over
// them. A run of expr's VM costs its setup, an argument slice for every
// function call and a dispatch per instruction; a rule such as
// `amount >= 1000 && count(history("logins", "30m"), .status == "FAILED") >= 3`
// is a few closure calls here.
//
// It answers only where its answer is the VM's: ok is false as soon as an
// operand has a type or value it leaves to the VM (a missing field, nil, a
// list, a mixed comparison) or a history feature fails, and the caller then
// runs the VM, whose result or error is the reference. Nothing it evaluates
// has side effects, so running the VM after it changes nothing. A
// differential test holds the two to the same results.
type fastProg func(v Fields) (out any, ok bool)

// fastCompiler builds fastProgs over one evaluator's history features.
type fastCompiler struct {
	feats   map[string]func(args ...any) (any, error)
	history History
	names   []string // the DecodeFields of the program's stream: where its fields are
}

// program returns the fastProg of a program's tree, or nil. asBool is set
// for programs compiled with expr.AsBool, whose VM fails on any other result;
// names are the DecodeFields of the stream whose events it reads.
func (c fastCompiler) program(n ast.Node, asBool bool, names []string) fastProg {
	c.names = names
	p := c.compile(n)
	if p == nil || !asBool {
		return p
	}
	return func(v Fields) (any, bool) {
		b, ok := fastBool(p, v)
		return b, ok
	}
}

// compile returns the fastProg of a program's tree (after expr's patches
// and optimizer), or nil when some node is not one it handles.
func (c fastCompiler) compile(n ast.Node) fastProg {
	switch n := n.(type) {
	case *ast.BoolNode:
		return constant(n.Value)
	case *ast.IntegerNode:
		return constant(n.Value)
	case *ast.FloatNode:
		return constant(n.Value)
	case *ast.StringNode:
		return constant(n.Value)
	case *ast.ConstantNode:
		switch n.Value.(type) {
		case bool, int, float64, string:
			return constant(n.Value)
		}
	case *ast.IdentifierNode:
		if strings.HasPrefix(n.Value, "$") {
			return nil // $env
		}
		name, slot := n.Value, slices.Index(c.names, n.Value)
		return func(v Fields) (any, bool) {
			x := v.get(name, slot)
			switch x.(type) {
			case bool, float64, string, int:
				return x, true
			}
			return nil, false
		}
	case *ast.UnaryNode:
		if n.Operator != "!" && n.Operator != "not" {
			return nil
		}
		if sub := c.compile(n.Node); sub != nil {
			return func(v Fields) (any, bool) {
				b, ok := fastBool(sub, v)
				return !b, ok
			}
		}
	case *ast.BinaryNode:
		return c.binary(n)
	case *ast.CallNode:
		return c.call(n)
	case *ast.BuiltinNode:
		return c.historyLen(n)
	}
	return nil
}

func constant(x any) fastProg {
	return func(Fields) (any, bool) { return x, true }
}

// fastBool runs p and wants a bool, as && and || do.
func fastBool(p fastProg, v Fields) (bool, bool) {
	x, ok := p(v)
	b, isBool := x.(bool)
	return b, ok && isBool
}

func (c fastCompiler) binary(n *ast.BinaryNode) fastProg {
	l, r := c.compile(n.Left), c.compile(n.Right)
	if l == nil || r == nil {
		return nil
	}
	switch n.Operator {
	case "&&", "and":
		return func(v Fields) (any, bool) {
			if b, ok := fastBool(l, v); !ok || !b {
				return false, ok
			}
			b, ok := fastBool(r, v)
			return b, ok
		}
	case "||", "or":
		return func(v Fields) (any, bool) {
			if b, ok := fastBool(l, v); !ok || b {
				return true, ok
			}
			b, ok := fastBool(r, v)
			return b, ok
		}
	case "==", "!=":
		want := n.Operator == "=="
		return func(v Fields) (any, bool) {
			x, okx := l(v)
			y, oky := r(v)
			if !okx || !oky {
				return nil, false
			}
			eq, ok := fastEqual(x, y)
			return eq == want, ok
		}
	case "<", "<=", ">", ">=":
		op := n.Operator
		return func(v Fields) (any, bool) {
			x, okx := l(v)
			y, oky := r(v)
			if !okx || !oky {
				return nil, false
			}
			return fastCompare(op, x, y)
		}
	}
	return nil
}

// fastEqual is expr's == for two numbers, two strings or two bools; other
// pairs are left to the VM.
func fastEqual(x, y any) (bool, bool) {
	switch x := x.(type) {
	case string:
		y, ok := y.(string)
		return x == y, ok
	case bool:
		y, ok := y.(bool)
		return x == y, ok
	}
	xf, xIsInt, xok := number(x)
	yf, yIsInt, yok := number(y)
	if !xok || !yok {
		return false, false
	}
	if xIsInt && yIsInt {
		return x.(int) == y.(int), true
	}
	return xf == yf, true
}

// fastCompare is expr's ordering of two numbers (ints compared as ints,
// otherwise as float64, as expr's runtime does).
func fastCompare(op string, x, y any) (any, bool) {
	xf, xIsInt, xok := number(x)
	yf, yIsInt, yok := number(y)
	if !xok || !yok {
		return nil, false
	}
	var c int
	if xIsInt && yIsInt {
		c = cmp.Compare(x.(int), y.(int))
	} else {
		switch { // Go's operators, not cmp.Compare: NaN compares false
		case xf < yf:
			c = -1
		case xf > yf:
			c = 1
		case xf == yf:
		default:
			return false, true // NaN: every ordering is false
		}
	}
	switch op {
	case "<":
		return c < 0, true
	case "<=":
		return c <= 0, true
	case ">":
		return c > 0, true
	}
	return c >= 0, true
}

func number(x any) (f float64, isInt, ok bool) {
	switch x := x.(type) {
	case int:
		return float64(x), true, true
	case float64:
		return x, false, true
	}
	return 0, false, false
}

// call is a history feature (features.go) with constant arguments.
func (c fastCompiler) call(n *ast.CallNode) fastProg {
	id, ok := n.Callee.(*ast.IdentifierNode)
	if !ok {
		return nil
	}
	fn := c.feats[id.Value]
	if fn == nil {
		return nil
	}
	args := make([]any, len(n.Arguments))
	for i, a := range n.Arguments {
		switch a := a.(type) {
		case *ast.IntegerNode:
			args[i] = a.Value
		case *ast.StringNode:
			args[i] = a.Value
		case *ast.BoolNode:
			args[i] = a.Value
		default:
			return nil
		}
	}
	return func(Fields) (any, bool) {
		out, err := fn(args...)
		return out, err == nil
	}
}

// historyLen is len(history(stream, window)), after historyPatcher.
func (c fastCompiler) historyLen(n *ast.BuiltinNode) fastProg {
	if n.Name != "len" || len(n.Arguments) != 1 {
		return nil
	}
	call, ok := n.Arguments[0].(*ast.CallNode)
	if !ok || len(call.Arguments) != 2 {
		return nil
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != "history" {
		return nil
	}
	s, ok1 := call.Arguments[0].(*ast.IntegerNode)
	w, ok2 := call.Arguments[1].(*ast.IntegerNode)
	if !ok1 || !ok2 {
		return nil
	}
	stream, window := s.Value, int64(w.Value)
	return func(Fields) (any, bool) {
		return len(c.history.Past(stream, window)), true
	}
}
