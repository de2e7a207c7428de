package rules

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"

	"github.com/vigil-cep/vigil/stream"
)

// History features.
//
// A rule such as count(history("logins", "30m"), .status == "FAILED") >= 3
// would run its predicate on every past event at every decision: the cost of a
// decision grows with the history. featurePatcher rewrites the common shapes
// into native functions instead:
//
//   count|any|all|none(history(S, D), P)  where P reads only the element
//       -> P is compiled once as an element predicate of S and evaluated once,
//          when each event of S arrives (its Mark); the query counts marks.
//   len(uniq(map(history(S, D), .F)))
//       -> a native distinct count over the rows' field F.
//
// The rewrite keeps expr's semantics exactly, including which error surfaces:
// elements are visited in the same order, predicates that failed on an event
// fail the query when the VM would have reached that event, and count stops at
// the same threshold as expr's optimizer (count > N, >= N, < N, <= N).

// Mark holds, for one past event, the results of its stream's element
// predicates: bit k of Set is predicate k's result; bit k of Failed says it
// failed, and History.Failure has its error. It holds no pointer, so that a
// key's marks are an array the collector does not look into.
type Mark struct {
	Set, Failed uint64
	// Inline is the event's value of its stream's inline field (see
	// Stream.inlineField) when it is a short string: a distinct count over
	// that field reads the key's marks, which are contiguous, instead of
	// every past event's row, each a cache miss of its own.
	Inline Short
}

// Short is a string of up to 15 bytes kept by value; the zero Short holds
// nothing (the reader falls back to the event's row).
type Short struct {
	n uint8 // length + 1; 0: not kept
	b [15]byte
}

// ShortOf returns b as a Short, or the zero Short when it is too long: the
// Mark.Inline of an event whose inline field (Stream's InlineField) holds
// it, also for a reader that has the value but not the event (a restore).
func ShortOf[S string | []byte](b S) Short {
	var sh Short
	if len(b) < len(sh.b)+1 {
		sh.n = uint8(len(b) + 1)
		copy(sh.b[:], b)
	}
	return sh
}

// view returns the string, aliasing sh: valid while sh is not changed.
func (sh *Short) view() (string, bool) {
	if sh.n == 0 {
		return "", false
	}
	return unsafe.String(&sh.b[0], int(sh.n-1)), true
}

// maxPredicates is how many element predicates a stream can hold (bits of a Mark).
const maxPredicates = 64

// Names of the native functions the rewrite calls.
const (
	fnCount    = "_vigil_hcount"
	fnAny      = "_vigil_hany"
	fnAll      = "_vigil_hall"
	fnNone     = "_vigil_hnone"
	fnDistinct = "_vigil_hdistinct"
)

// featurePatcher rewrites history feature shapes; it runs before the history
// and field patchers, so it sees history() calls and members as written.
type featurePatcher struct {
	c *compiler
	// register allows new element predicates (at load time); at bind time the
	// ruleset is shared and only existing ones are looked up.
	register bool
	// refs collects the history() calls rewritten away, for retention.
	refs *[]historyRef
}

func (p *featurePatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BuiltinNode:
		switch n.Name {
		case "count", "any", "all", "none":
			p.predicateFeature(node, n)
		case "len":
			p.distinctFeature(node, n)
		}
	case *ast.BinaryNode:
		p.countThreshold(n)
	}
}

// historyArgs reads a history("stream", "window") call with literal arguments.
func (p *featurePatcher) historyArgs(n ast.Node) (historyRef, bool) {
	call, ok := n.(*ast.CallNode)
	if !ok {
		return historyRef{}, false
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != "history" {
		return historyRef{}, false
	}
	ref, err := p.c.resolveHistory(call)
	return ref, err == nil
}

func (p *featurePatcher) predicateFeature(node *ast.Node, n *ast.BuiltinNode) {
	if len(n.Arguments) != 2 {
		return
	}
	ref, ok := p.historyArgs(n.Arguments[0])
	if !ok {
		return
	}
	pred, ok := n.Arguments[1].(*ast.PredicateNode)
	if !ok || !isBoolean(pred.Node) || !elementOnly(pred.Node) {
		return
	}
	toIdentifiers(&pred.Node)
	k, ok := p.c.rs.Streams[ref.stream].predicate(pred.Node.String(), p.register)
	if !ok {
		return
	}
	fn := map[string]string{"count": fnCount, "any": fnAny, "all": fnAll, "none": fnNone}[n.Name]
	args := []ast.Node{&ast.IntegerNode{Value: ref.stream}, &ast.IntegerNode{Value: int(ref.window)}, &ast.IntegerNode{Value: k}}
	if n.Name == "count" {
		args = append(args, &ast.IntegerNode{Value: 0}) // threshold, set by the parent comparison
	}
	*p.refs = append(*p.refs, ref)
	ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fn}, Arguments: args})
}

// countThreshold mirrors expr's count_any and count_threshold optimizers:
// count(...) compared with a literal stops counting once the outcome is known.
func (p *featurePatcher) countThreshold(n *ast.BinaryNode) {
	call, ok := n.Left.(*ast.CallNode)
	if !ok {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != fnCount {
		return
	}
	lit, ok := n.Right.(*ast.IntegerNode)
	if !ok || lit.Value < 0 {
		return
	}
	threshold := 0
	switch {
	case n.Operator == ">" && lit.Value == 0, n.Operator == ">=" && lit.Value == 1:
		threshold = 1 // expr turns these into any()
	case n.Operator == ">", n.Operator == "<=":
		threshold = lit.Value + 1
	case n.Operator == ">=", n.Operator == "<":
		threshold = lit.Value
	}
	if threshold == 1 && !(n.Operator == ">" || n.Operator == ">=") {
		threshold = 0 // expr applies neither optimizer here
	}
	call.Arguments[3] = &ast.IntegerNode{Value: threshold}
}

func (p *featurePatcher) distinctFeature(node *ast.Node, n *ast.BuiltinNode) {
	if len(n.Arguments) != 1 {
		return
	}
	uniq, ok := n.Arguments[0].(*ast.BuiltinNode)
	if !ok || uniq.Name != "uniq" || len(uniq.Arguments) != 1 {
		return
	}
	m, ok := uniq.Arguments[0].(*ast.BuiltinNode)
	if !ok || m.Name != "map" || len(m.Arguments) != 2 {
		return
	}
	ref, ok := p.historyArgs(m.Arguments[0])
	if !ok {
		return
	}
	pred, ok := m.Arguments[1].(*ast.PredicateNode)
	if !ok {
		return
	}
	field, ok := elementField(pred.Node)
	if !ok {
		return
	}
	*p.refs = append(*p.refs, ref)
	st := p.c.rs.Streams[ref.stream]
	if st.inlineField == "" && p.register {
		st.inlineField = field // the first distinct field of a stream is kept in its marks
	}
	ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fnDistinct}, Arguments: []ast.Node{
		&ast.IntegerNode{Value: ref.stream}, &ast.IntegerNode{Value: int(ref.window)}, &ast.StringNode{Value: field},
		&ast.BoolNode{Value: field == st.inlineField}}})
}

// elementField returns F when n is .F or #.F.
func elementField(n ast.Node) (string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok || m.Optional || m.Method {
		return "", false
	}
	if ptr, ok := m.Node.(*ast.PointerNode); !ok || ptr.Name != "" {
		return "", false
	}
	s, ok := m.Property.(*ast.StringNode)
	if !ok || !identRE.MatchString(s.Value) {
		return "", false
	}
	return s.Value, true
}

// isBoolean reports whether n always yields a bool (or fails).
func isBoolean(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.BoolNode:
		return true
	case *ast.UnaryNode:
		return n.Operator == "!" || n.Operator == "not"
	case *ast.BinaryNode:
		switch n.Operator {
		case "==", "!=", "<", "<=", ">", ">=", "&&", "||", "and", "or", "in", "matches", "contains", "startsWith", "endsWith":
			return true
		}
	}
	return false
}

// elementOnly reports whether a predicate body reads nothing but the
// element's own fields (.F) and constants: no outer variables, no calls, no
// nested predicates. Only such a predicate can be evaluated once per event.
func elementOnly(n ast.Node) bool {
	ok := true
	var visit func(n ast.Node)
	visit = func(n ast.Node) {
		switch n := n.(type) {
		case nil:
		case *ast.MemberNode:
			if _, isField := elementField(n); isField {
				return
			}
			ok = false
		case *ast.IdentifierNode, *ast.PointerNode, *ast.CallNode, *ast.PredicateNode, *ast.VariableDeclaratorNode, *ast.ChainNode:
			ok = false
		case *ast.BuiltinNode:
			for _, a := range n.Arguments {
				if _, isPred := a.(*ast.PredicateNode); isPred {
					ok = false
				}
				visit(a)
			}
		default:
			for _, c := range children(n) {
				visit(c)
			}
		}
	}
	visit(n)
	return ok
}

// toIdentifiers replaces each .F in an element predicate by the identifier F,
// so that the predicate compiles as an expression over the event itself.
func toIdentifiers(slot *ast.Node) {
	if f, ok := elementField(*slot); ok {
		ast.Patch(slot, &ast.IdentifierNode{Value: f})
		return
	}
	switch n := (*slot).(type) {
	case *ast.UnaryNode:
		toIdentifiers(&n.Node)
	case *ast.BinaryNode:
		toIdentifiers(&n.Left)
		toIdentifiers(&n.Right)
	case *ast.ConditionalNode:
		toIdentifiers(&n.Cond)
		toIdentifiers(&n.Exp1)
		toIdentifiers(&n.Exp2)
	case *ast.BuiltinNode:
		for i := range n.Arguments {
			toIdentifiers(&n.Arguments[i])
		}
	case *ast.ArrayNode:
		for i := range n.Nodes {
			toIdentifiers(&n.Nodes[i])
		}
	case *ast.MapNode:
		for i := range n.Pairs {
			toIdentifiers(&n.Pairs[i])
		}
	case *ast.PairNode:
		toIdentifiers(&n.Key)
		toIdentifiers(&n.Value)
	case *ast.SliceNode:
		toIdentifiers(&n.Node)
		toIdentifiers(&n.From)
		toIdentifiers(&n.To)
	case *ast.MemberNode:
		toIdentifiers(&n.Node)
		toIdentifiers(&n.Property)
	}
}

// predicate returns the index of the element predicate src of st, adding it
// when register is set.
func (st *Stream) predicate(src string, register bool) (int, bool) {
	if k, ok := st.predIndex[src]; ok {
		return k, true
	}
	if !register || len(st.predicates) >= maxPredicates {
		return 0, false
	}
	if st.predIndex == nil {
		st.predIndex = map[string]int{}
	}
	k := len(st.predicates)
	st.predIndex[src] = k
	st.predicates = append(st.predicates, &exprSource{src: src, path: fmt.Sprintf("streams.%s(predicate %d)", st.Name, k),
		scope: scopeEvent, stream: st.Index, kind: reflect.Bool, untyped: true})
	return k, true
}

// featureFuncs are the native functions behind the rewrite, bound to ctx.
func featureFuncs(ctx *Context) map[string]func(args ...any) (any, error) {
	marks := func(args []any) queryMarks {
		s, w := args[0].(int), int64(args[1].(int))
		return queryMarks{h: ctx.History, stream: s, window: w, ms: ctx.History.Past(s, w), k: args[2].(int)}
	}
	stop := func(f func(args ...any) (any, error)) func(args ...any) (any, error) {
		return func(args ...any) (any, error) {
			if err := ctx.check(); err != nil {
				return nil, err
			}
			return f(args...)
		}
	}
	fns := map[string]func(args ...any) (any, error){
		fnCount: func(args ...any) (any, error) {
			q := marks(args)
			threshold, n := args[3].(int), 0
			for i := range q.ms {
				if err := q.failed(i); err != nil {
					return nil, err
				}
				if q.ms[i].Mark.Set&(1<<q.k) != 0 {
					if n++; n == threshold {
						break
					}
				}
			}
			return n, nil
		},
		// any, all and none stop at the first element that decides them, as
		// expr's builtins do, so that a later failing element is not reached.
		fnAny: func(args ...any) (any, error) {
			return marks(args).scan(true)
		},
		fnAll: func(args ...any) (any, error) {
			found, err := marks(args).scan(false)
			return !found, err
		},
		fnNone: func(args ...any) (any, error) {
			found, err := marks(args).scan(true)
			return !found, err
		},
		fnDistinct: func(args ...any) (any, error) {
			s, w := args[0].(int), int64(args[1].(int))
			past := ctx.History.Past(s, w)
			field, inline := args[2].(string), args[3].(bool)
			fr := stream.NewFieldReader(field) // the rows share their names: find field once
			d := distinctSet{onlyStrs: true}
			var values []any // built at the first value not kept inline
			for i := range past {
				var v distinctValue
				if inline {
					v.s, v.isStr = past[i].Mark.Inline.view()
				}
				if !v.isStr {
					if values == nil {
						values = ctx.History.Values(s, w)
					}
					r := values[i]
					if row, ok := r.(*stream.Row); ok {
						v.v, _ = fr.Get(row)
					} else {
						v.v = fieldOf(r, field)
					}
					v.s, v.isStr = v.v.(string)
				}
				d.add(&v)
			}
			return d.len(), nil
		},
	}
	for name, f := range fns {
		fns[name] = stop(f) // a Guard's stop ends a slow rule at its next feature (guard.go)
	}
	return fns
}

// distinctSet counts distinct values as expr's uniq() would (runtime.Equal),
// in time linear in the values: the first few are compared in an array, and
// beyond that strings and numbers are hashed, so that a history of distinct
// values costs what the cost bound assumes (cost.go), not its square. Lists
// and objects, rare as a distinct field, stay in the array.
type distinctSet struct {
	seen     [16]distinctValue // the first values, compared one by one
	n        int               // of seen in use
	onlyStrs bool              // seen[:n] holds strings only
	more     []distinctValue   // lists and objects beyond seen
	strs     map[string]struct{}
	nums     map[float64]struct{}
	count    int
}

func (d *distinctSet) add(v *distinctValue) {
	if d.strs != nil {
		if n, ok := hashable(v); ok {
			if _, dup := d.nums[n]; !dup {
				d.nums[n] = struct{}{}
				d.count++
			}
			return
		}
		if v.isStr {
			if _, dup := d.strs[v.s]; !dup {
				d.strs[v.s] = struct{}{}
				d.count++
			}
			return
		}
	}
	if v.isStr && d.onlyStrs {
		for i := range d.n { // the usual case: a few distinct strings
			if d.seen[i].s == v.s {
				return
			}
		}
	} else if has(d.seen[:d.n], v) || len(d.more) > 0 && has(d.more, v) {
		return
	}
	if !v.isStr {
		d.onlyStrs = false
	}
	d.count++
	if d.n < len(d.seen) {
		d.seen[d.n] = *v
		d.n++
	} else {
		d.more = append(d.more, *v)
	}
	if d.strs == nil && d.n == len(d.seen) {
		// Hash strings and numbers from now on; keep the rest in seen.
		d.strs, d.nums = map[string]struct{}{}, map[float64]struct{}{}
		kept := 0
		for _, e := range d.seen[:d.n] {
			if n, ok := hashable(&e); ok {
				d.nums[n] = struct{}{}
			} else if e.isStr {
				d.strs[e.s] = struct{}{}
			} else {
				d.seen[kept] = e
				kept++
			}
		}
		d.n = kept
		d.onlyStrs = kept == 0
	}
}

func (d *distinctSet) len() int { return d.count }

// has reports whether list holds a value equal to v.
func has(list []distinctValue, v *distinctValue) bool {
	for i := range list {
		e := &list[i]
		if e.isStr || v.isStr {
			if e.isStr && v.isStr && e.s == v.s { // what runtime.Equal decides for two strings, without its type switch
				return true
			}
		} else if runtime.Equal(v.v, e.v) {
			return true
		}
	}
	return false
}

// hashable returns a non-string value's number as runtime.Equal compares
// numbers (by value, whatever their Go type); NaN equals nothing, itself
// included, so it stays in the list.
func hashable(v *distinctValue) (float64, bool) {
	var f float64
	switch x := v.v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case int32:
		f = float64(x)
	case float32:
		f = float64(x)
	default:
		return 0, false
	}
	return f, !v.isStr && !math.IsNaN(f)
}

// distinctValue is one value of a distinct count: a string (from a Mark or a
// row) or any other value.
type distinctValue struct {
	s     string
	isStr bool
	v     any // when not a string
}

// queryMarks is what a native query reads: the marks of the events of
// stream in window, and the predicate k it looks at in them.
type queryMarks struct {
	h      History
	stream int
	window int64
	ms     []Past
	k      int
}

// failed is the error of predicate k on the ith event, when its mark says
// it failed (History.Failure keeps the message).
func (q queryMarks) failed(i int) error {
	if q.ms[i].Mark.Failed&(1<<q.k) == 0 {
		return nil
	}
	return fmt.Errorf("%s", q.h.Failure(q.stream, q.window, i, q.k))
}

// scan walks the events' marks in order until one has predicate k equal to
// want, failing at a mark where k failed first.
func (q queryMarks) scan(want bool) (found bool, err error) {
	for i := range q.ms {
		if err := q.failed(i); err != nil {
			return false, err
		}
		if (q.ms[i].Mark.Set&(1<<q.k) != 0) == want {
			return true, nil
		}
	}
	return false, nil
}

// fieldOf is .F of a history element (a Row, or a whole event map).
func fieldOf(r any, field string) any {
	switch x := r.(type) {
	case *stream.Row:
		v, _ := x.Get(field)
		return v
	case map[string]any:
		return x[field]
	}
	return nil
}
