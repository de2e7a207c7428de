package rules

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp/syntax"
	"strconv"

	"github.com/expr-lang/expr/ast"
)

// The cost bound (docs/design.md, "Rule safety"). Every expression's
// worst-case cost per evaluation is estimated from its compiled tree before the
// ruleset is accepted, with a size bound for every collection and string it
// can meet: history() by its stream's max_history, a field of an event by its
// stream's max_field_bytes (enforced when the event is decoded), a whole
// event by the record limit, a range by its constant bounds. Loops multiply:
// a predicate's cost counts once per element its collection may hold. This is
// how CEL's cost estimator lets Kubernetes admit rules written by users.
//
// A unit is about one instruction of expr's VM, 10 ns on the 2-core machine
// the figures of docs/performance.md come from; the per-byte and per-element
// weights below were measured there (BenchmarkCostCalibration).
const (
	// DefaultCostBudget is the default worst-case cost of one evaluation of
	// one expression: about a millisecond.
	DefaultCostBudget = 100_000
	// MaxCostBudget is the ceiling a ruleset's limits.cost may raise the
	// budget to: about 10 ms per expression per event.
	MaxCostBudget = 1_000_000
	// DefaultMaxFieldBytes bounds a field an expression reads (a string's
	// bytes, or the JSON text of a list or object).
	DefaultMaxFieldBytes = 512
	// DefaultMaxRecordBytes bounds a whole record when no MaxRecordBytes
	// option says otherwise; it is the service's default --max-record-bytes.
	DefaultMaxRecordBytes = 1 << 20
)

// MaxRecordBytes tells Load the largest record the ruleset will read (the
// service's or replay's --max-record-bytes): whole events are bounded by it
// in the cost estimate. Zero or less keeps DefaultMaxRecordBytes.
func MaxRecordBytes(n int) LoadOption {
	return loadOptionFunc(func(c *compiler) {
		if n > 0 {
			c.rs.maxRecord = float64(n)
		}
	})
}

// shape is the worst-case size of a value: the bytes of a string (or of a
// value's JSON text), the elements of a list or the entries of a map, and
// the shape of those elements. A shape whose elem is itself is any JSON
// value of at most bytes bytes.
type shape struct {
	bytes, items float64
	elem         *shape
	why          string // where the bound comes from, for messages
}

var scalar = &shape{bytes: 24, why: "a scalar"}

// within is any JSON value of at most n bytes of text: a string of n bytes
// (which predicates iterate byte by byte, as runes), a list of n/2 elements
// (each "0,"), nested likewise.
func within(n float64, why string) *shape {
	s := &shape{bytes: n, items: n, why: why}
	s.elem = s
	return s
}

// text is the length of s as JSON text.
func (s *shape) text() float64 {
	if s == nil {
		return scalar.bytes
	}
	if s.elem == s {
		return s.bytes // within: the bound is on the text
	}
	if s.elem == nil {
		return max(s.bytes, s.items*2)
	}
	return max(s.bytes, s.items*(s.elem.text()+1))
}

// count is how many elements iterating s may visit: a list's or map's
// elements, or a string's bytes (expr iterates a string's runes).
func (s *shape) count() float64 {
	if s == nil {
		return 0
	}
	if s.elem == nil && s.items == 0 {
		return s.bytes
	}
	return s.items
}

func (s *shape) element() *shape {
	if s == nil || s.elem == nil {
		return scalar
	}
	return s.elem
}

// union is a shape that bounds both a and b.
func union(a, b *shape) *shape { return unionDepth(a, b, 0) }

func unionDepth(a, b *shape, depth int) *shape {
	switch {
	case depth > 8 && a != nil && b != nil:
		return within(max(a.text(), b.text()), a.why)
	case a == nil:
		return b
	case b == nil, a == b:
		return a
	case a.elem == a && b.bytes <= a.bytes && b.items <= a.items:
		return a
	case b.elem == b && a.bytes <= b.bytes && a.items <= b.items:
		return b
	}
	return &shape{bytes: max(a.bytes, b.bytes), items: max(a.items, b.items), elem: unionDepth(a.elem, b.elem, depth+1), why: a.why}
}

// estimate is a node's worst-case cost and the shape of its value.
type estimate struct {
	cost float64
	sh   *shape
}

// estimator estimates the cost of one compiled expression.
type estimator struct {
	c      *compiler
	s      *exprSource
	budget float64
	field  *shape            // a field of the stream's events
	vars   map[string]*shape // let variables in scope
	ptrs   []*shape          // the element (#) of each enclosing predicate
	accs   []*shape          // #acc of each enclosing reduce
	err    error             // a refusal that is not about cost
	blame  ast.Node          // the costliest node over budget with nothing inside it over
	blamed estimate          // blame's estimate
	why    string            // what makes blame expensive
	blames int               // nodes blamed so far
}

// checkCost refuses s when its compiled tree may cost more than the
// ruleset's budget per evaluation, naming the innermost expensive part.
func (c *compiler) checkCost(s *exprSource, tree ast.Node) error {
	w, total := c.estimateCost(s, tree)
	if w.err != nil {
		return w.err
	}
	if total.cost <= w.budget {
		return nil
	}
	at, why := w.blame, w.why
	if at == nil {
		at, why = tree, "the expression as a whole"
	}
	if call, ok := at.(*ast.CallNode); ok {
		at = call.Callee
	}
	return c.at(s, at.Location().From, fmt.Errorf("expression may cost %s units per evaluation, over the budget of %s (limits.cost; a unit is about 10 ns): %s",
		units(total.cost), units(w.budget), why))
}

// estimateCost walks tree, the compiled form of s.
func (c *compiler) estimateCost(s *exprSource, tree ast.Node) (*estimator, estimate) {
	w := &estimator{c: c, s: s, budget: c.budget(), vars: map[string]*shape{}}
	w.field = within(c.fieldBytes(s.stream), c.fieldWhy(s.stream))
	return w, w.walk(tree)
}

// budget is the document's limits.cost, or the default.
func (c *compiler) budget() float64 {
	if l := c.doc.Limits; l != nil && l.Cost > 0 {
		return float64(min(l.Cost, MaxCostBudget))
	}
	return DefaultCostBudget
}

func (c *compiler) fieldBytes(stream int) float64 {
	if stream >= 0 && stream < len(c.rs.Streams) && c.rs.Streams[stream].MaxFieldBytes > 0 {
		return float64(c.rs.Streams[stream].MaxFieldBytes)
	}
	return DefaultMaxFieldBytes
}

func (c *compiler) fieldWhy(stream int) string {
	name := "the stream"
	if stream >= 0 && stream < len(c.rs.Streams) {
		name = strconv.Quote(c.rs.Streams[stream].Name)
	}
	return fmt.Sprintf("a field of %s, up to %s bytes (max_field_bytes)", name, units(c.fieldBytes(stream)))
}

func (c *compiler) record() *shape {
	return within(c.rs.maxRecord, fmt.Sprintf("a whole record, up to %s bytes (--max-record-bytes)", units(c.rs.maxRecord)))
}

// units renders a cost or a size for a message.
func units(f float64) string {
	switch {
	case math.IsInf(f, 0) || f >= 1e15:
		return "more than 10^15"
	case f >= 1e9:
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
	return strconv.FormatInt(int64(math.Ceil(f)), 10)
}

// over records n as the part to blame when it alone exceeds the budget,
// nothing inside it does, and no other such part costs more.
func (w *estimator) over(n ast.Node, before int, e estimate, why string) estimate {
	if e.cost > w.budget && w.blames == before {
		w.blames++
		if w.blame == nil || e.cost > w.blamed.cost {
			w.blame, w.blamed, w.why = n, e, why
		}
	}
	return e
}

func (w *estimator) refuse(n ast.Node, err error) {
	if w.err == nil {
		if call, ok := n.(*ast.CallNode); ok {
			n = call.Callee
		}
		w.err = w.c.at(w.s, n.Location().From, err)
	}
}

// walk returns the worst-case cost of evaluating n once, and its value's shape.
func (w *estimator) walk(n ast.Node) estimate {
	if n == nil {
		return estimate{}
	}
	before := w.blames
	switch n := n.(type) {
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return estimate{1, scalar}
	case *ast.StringNode:
		return estimate{1, &shape{bytes: float64(len(n.Value)), why: "a string literal"}}
	case *ast.BytesNode:
		return estimate{1, &shape{bytes: float64(len(n.Value)), why: "a literal"}}
	case *ast.ConstantNode:
		return estimate{1, constShape(n.Value)}
	case *ast.IdentifierNode:
		return estimate{1, w.identifier(n)}
	case *ast.PointerNode:
		switch {
		case n.Name == "acc" && len(w.accs) > 0:
			return estimate{1, w.accs[len(w.accs)-1]}
		case n.Name == "" && len(w.ptrs) > 0:
			return estimate{1, w.ptrs[len(w.ptrs)-1]}
		case n.Name == "":
			return estimate{1, w.field}
		}
		return estimate{1, scalar} // #index
	case *ast.UnaryNode:
		e := w.walk(n.Node)
		return estimate{e.cost + 1, scalar}
	case *ast.ChainNode:
		return w.walk(n.Node)
	case *ast.MemberNode:
		obj, prop := w.walk(n.Node), w.walk(n.Property)
		return estimate{obj.cost + prop.cost + 2, obj.sh.element()}
	case *ast.SliceNode:
		obj, from, to := w.walk(n.Node), w.walk(n.From), w.walk(n.To)
		return estimate{obj.cost + from.cost + to.cost + 2, obj.sh}
	case *ast.BinaryNode:
		e, why := w.binary(n)
		return w.over(n, before, e, why)
	case *ast.ConditionalNode:
		c, a, b := w.walk(n.Cond), w.walk(n.Exp1), w.walk(n.Exp2)
		return estimate{c.cost + max(a.cost, b.cost) + 1, union(a.sh, b.sh)}
	case *ast.VariableDeclaratorNode:
		v := w.walk(n.Value)
		old, had := w.vars[n.Name]
		w.vars[n.Name] = v.sh
		e := w.walk(n.Expr)
		if had {
			w.vars[n.Name] = old
		} else {
			delete(w.vars, n.Name)
		}
		return estimate{v.cost + e.cost + 1, e.sh}
	case *ast.SequenceNode:
		var out estimate
		for _, c := range n.Nodes {
			e := w.walk(c)
			out = estimate{out.cost + e.cost, e.sh}
		}
		return out
	case *ast.ArrayNode:
		out := estimate{cost: float64(len(n.Nodes)) + 1}
		var elem *shape
		for _, c := range n.Nodes {
			e := w.walk(c)
			out.cost += e.cost
			elem = union(elem, e.sh)
		}
		out.sh = &shape{items: float64(len(n.Nodes)), elem: elem, why: "a list literal"}
		return out
	case *ast.MapNode:
		out := estimate{cost: 2*float64(len(n.Pairs)) + 1}
		var elem *shape
		for _, p := range n.Pairs {
			e := w.walk(p)
			out.cost += e.cost
			elem = union(elem, e.sh)
		}
		out.sh = &shape{items: float64(len(n.Pairs)), elem: elem, why: "a map literal"}
		return out
	case *ast.PairNode:
		k, v := w.walk(n.Key), w.walk(n.Value)
		return estimate{k.cost + v.cost, v.sh}
	case *ast.CallNode:
		e, why := w.call(n)
		return w.over(n, before, e, why)
	case *ast.BuiltinNode:
		e, why := w.builtin(n)
		return w.over(n, before, e, why)
	case *ast.PredicateNode:
		return w.walk(n.Node)
	}
	// A node kind this estimator does not know: refuse rather than guess.
	w.refuse(n, fmt.Errorf("internal error: no cost model for %T", n))
	return estimate{math.Inf(1), scalar}
}

func (w *estimator) identifier(n *ast.IdentifierNode) *shape {
	if sh, ok := w.vars[n.Value]; ok {
		return sh
	}
	switch n.Value {
	case "$env":
		return w.c.record()
	case "left", "right":
		if w.s.scope == scopeJoin {
			return w.c.record()
		}
	}
	if t := n.Type(); t != nil {
		switch t.Kind() {
		case reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
			return scalar
		}
	}
	return w.field
}

// constShape is the shape of a constant the optimizer folded.
func constShape(v any) *shape {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return &shape{bytes: float64(rv.Len()), why: "a constant"}
	case reflect.Slice, reflect.Array, reflect.Map:
		n := float64(rv.Len())
		return &shape{bytes: n * 8, items: n, elem: scalar, why: "a constant"}
	}
	return scalar
}

// stringy reports whether a value of shape s may be a string longer than a scalar.
func stringy(s *shape) bool { return s != nil && s.bytes > scalar.bytes }

// binary estimates a binary operator, and says what makes it expensive
// (for a refusal that blames it).
func (w *estimator) binary(n *ast.BinaryNode) (estimate, string) {
	if n.Operator == ".." {
		e := w.rangeOf(n)
		return e, e.sh.why + " is too long"
	}
	l, r := w.walk(n.Left), w.walk(n.Right)
	base := l.cost + r.cost + 1
	why := fmt.Sprintf("%s over %s", n.Operator, l.sh.why)
	switch n.Operator {
	case "==", "!=", "<", ">", "<=", ">=":
		// Strings compare up to the shorter one's length; lists element by element.
		return estimate{base + min(l.sh.text(), r.sh.text())/256, scalar}, why
	case "+":
		if stringy(l.sh) || stringy(r.sh) {
			b := l.sh.text() + r.sh.text()
			return estimate{base + b/8, &shape{bytes: b, why: "a concatenation"}}, why
		}
		return estimate{base, scalar}, why
	case "in", "not in":
		if _, ok := n.Right.(*ast.ConstantNode); ok {
			return estimate{base + 1, scalar}, why // the optimizer made it a set lookup
		}
		items := r.sh.element()
		return estimate{base + r.sh.count()*(2+min(l.sh.text(), items.text())/256), scalar},
			fmt.Sprintf("in compares with every element of %s", r.sh.why)
	case "contains", "startsWith", "endsWith":
		return estimate{base + l.sh.text()/64, scalar}, why
	case "matches":
		perByte, err := regexpCost(n.Right)
		if err != nil {
			w.refuse(n.Right, err)
			return estimate{math.Inf(1), scalar}, why
		}
		return estimate{base + l.sh.text()*perByte, scalar},
			fmt.Sprintf("matches scans %s (regular expressions cost about 50 ns a byte here)", l.sh.why)
	case "??":
		return estimate{base, union(l.sh, r.sh)}, why
	}
	return estimate{base, scalar}, why
}

// regexpCost is the cost per byte of input of matching the pattern n, which
// must be a constant: a pattern read from the event would be compiled at
// every evaluation and could be anything. Go's regexp is linear in the input
// (no backtracking blow-up); its NFA costs grow with the program's size.
func regexpCost(n ast.Node) (float64, error) {
	var pat string
	switch p := n.(type) {
	case *ast.StringNode:
		pat = p.Value
	case *ast.ConstantNode:
		s, ok := p.Value.(string)
		if !ok {
			return 0, errors.New("matches needs a constant pattern, a string written in the expression")
		}
		pat = s
	default:
		return 0, errors.New("matches needs a constant pattern, a string written in the expression: a pattern read from the event would be compiled at every evaluation")
	}
	re, err := syntax.Parse(pat, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("matches: %w", err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("matches: %w", err)
	}
	return 3 + float64(len(prog.Inst))/4, nil
}

// rangeOf is a..b: only with constant bounds, so that its size is known.
func (w *estimator) rangeOf(n *ast.BinaryNode) estimate {
	lo, ok1 := constInt(n.Left)
	hi, ok2 := constInt(n.Right)
	if !ok1 || !ok2 {
		w.refuse(n, errors.New("a range needs constant bounds (numbers written in the expression), so that its size is known when the rule is saved"))
		return estimate{math.Inf(1), scalar}
	}
	items := max(0, float64(hi)-float64(lo)+1)
	return estimate{2 + items/4, &shape{items: items, bytes: items * 8, elem: scalar, why: fmt.Sprintf("the range %d..%d (%s numbers)", lo, hi, units(items))}}
}

func constInt(n ast.Node) (int, bool) {
	switch n := n.(type) {
	case *ast.IntegerNode:
		return n.Value, true
	case *ast.ConstantNode:
		i, ok := n.Value.(int)
		return i, ok
	case *ast.UnaryNode:
		if i, ok := constInt(n.Node); ok && n.Operator == "-" {
			return -i, true
		}
	}
	return 0, false
}

// call estimates Vigil's own functions (the patched forms of history() and
// its features, field reads, match, timestamp).
func (w *estimator) call(n *ast.CallNode) (estimate, string) {
	var args float64
	var first *shape
	for i, a := range n.Arguments {
		e := w.walk(a)
		args += e.cost
		if i == 0 {
			first = e.sh
		}
	}
	name := ""
	if id, ok := n.Callee.(*ast.IdentifierNode); ok {
		name = id.Value
	}
	switch name {
	case fieldFunc:
		return estimate{args + 2, first.element()}, ""
	case "timestamp":
		return estimate{args + 2, scalar}, ""
	case matchFunc:
		steps := max(w.s.matchItems, 1)
		events := &shape{items: steps, elem: w.c.eventShape(w.s.stream), why: fmt.Sprintf("the events a step of a partial match took, up to %s", units(steps))}
		return estimate{args + 5 + 2*steps, &shape{items: 1, elem: events, why: "match"}}, ""
	case "history":
		h := w.history(n)
		return estimate{args + 5 + h.items/2, h}, "history() copies " + h.why
	case fnCount, fnAny, fnAll, fnNone:
		h := w.history(n)
		return estimate{args + 5 + h.items/8, scalar}, "the history feature scans " + h.why
	case fnDistinct:
		h := w.history(n)
		per := 3 + w.c.fieldBytes(w.historyStream(n))/100 // hash the value, look it up
		return estimate{args + 5 + h.items*per, scalar}, "the distinct count reads " + h.why
	}
	return estimate{args + 10, w.c.record()}, fmt.Sprintf("%s() is called", name)
}

// history is the shape of what a (patched) history call reads: its first
// argument is the stream's index.
func (w *estimator) history(n *ast.CallNode) *shape {
	st := w.historyStream(n)
	items := float64(DefaultMaxHistory)
	name := "a stream"
	if st >= 0 && st < len(w.c.rs.Streams) {
		items, name = float64(w.c.rs.Streams[st].MaxHistory), strconv.Quote(w.c.rs.Streams[st].Name)
	}
	return &shape{items: items, elem: w.c.eventShape(st), why: fmt.Sprintf("up to %s events of %s (max_history)", units(items), name)}
}

func (w *estimator) historyStream(n *ast.CallNode) int {
	if len(n.Arguments) > 0 {
		if i, ok := constInt(n.Arguments[0]); ok {
			return i
		}
	}
	return -1
}

// eventShape is one past event of stream as history keeps it: a map of
// fields, each bounded by max_field_bytes, the whole by the record limit.
func (c *compiler) eventShape(stream int) *shape {
	rec := c.rs.maxRecord
	return &shape{bytes: rec, items: rec / 4, elem: within(c.fieldBytes(stream), c.fieldWhy(stream)), why: "an event"}
}

// predicates are the builtins that run their second argument per element.
var predicates = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "filter": true, "map": true,
	"find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
	"count": true, "sum": true, "groupBy": true, "sortBy": true, "reduce": true,
}

func (w *estimator) builtin(n *ast.BuiltinNode) (estimate, string) {
	if predicates[n.Name] && len(n.Arguments) >= 2 {
		if _, ok := n.Arguments[1].(*ast.PredicateNode); ok {
			return w.loop(n)
		}
	}
	var args float64
	shapes := make([]*shape, len(n.Arguments))
	for i, a := range n.Arguments {
		e := w.walk(a)
		args += e.cost
		shapes[i] = e.sh
	}
	arg := func(i int) *shape {
		if i < len(shapes) {
			return shapes[i]
		}
		return scalar
	}
	a := arg(0)
	str := func(b float64, why string) *shape { return &shape{bytes: b, why: why} }
	base := args + 2
	switch n.Name {
	case "first", "last", "get":
		return estimate{base, a.element()}, ""
	case "len", "type", "abs", "ceil", "floor", "round",
		"bitand", "bitor", "bitxor", "bitnand", "bitshl", "bitshr", "bitushr", "bitnot":
		return estimate{base, scalar}, ""
	case "int", "float", "duration", "timezone":
		return estimate{base + a.text()/8, scalar}, ""
	case "date":
		return estimate{base + 10 + a.text()/8, scalar}, ""
	case "string":
		return estimate{base + a.text()/3, str(a.text(), "a string")}, "string() writes " + a.why
	case "toJSON":
		return estimate{base + a.text()*3, str(a.text()*2, "JSON text")}, "toJSON() writes " + a.why
	case "fromJSON":
		return estimate{base + a.text()*3, within(a.text(), "parsed JSON")}, "fromJSON() parses " + a.why
	case "toBase64", "fromBase64":
		return estimate{base + a.text()/2, str(a.text()*4/3+4, "base64")}, n.Name + "() converts " + a.why
	case "trim", "trimPrefix", "trimSuffix", "upper", "lower":
		return estimate{base + a.text()/3, str(a.text(), a.why)}, n.Name + "() copies " + a.why
	case "indexOf", "lastIndexOf", "hasPrefix", "hasSuffix":
		return estimate{base + a.text()/64, scalar}, n.Name + "() scans " + a.why
	case "split", "splitAfter":
		b := a.text()
		return estimate{base + b/2, &shape{items: b + 1, bytes: b * 3, elem: str(b, a.why), why: "split " + a.why}}, n.Name + "() splits " + a.why
	case "replace":
		b := a.text() * (1 + arg(2).text()) // every position may be replaced
		if old, ok := n.Arguments[1].(*ast.StringNode); ok && old.Value != "" {
			b = a.text() * max(1, arg(2).text()/float64(len(old.Value)))
		}
		return estimate{base + b/2, str(b, "a replacement")}, "replace() rewrites " + a.why
	case "repeat":
		times, ok := 0, false
		if len(n.Arguments) > 1 {
			times, ok = constInt(n.Arguments[1])
		}
		if !ok {
			w.refuse(n, errors.New("repeat() needs a constant count, so that the size of its result is known"))
			return estimate{math.Inf(1), scalar}, ""
		}
		b := a.text() * float64(max(times, 0))
		return estimate{base + b/2, str(b, "a repeated string")}, "repeat() builds a long string"
	case "join":
		b := a.items * (a.element().text() + arg(1).text())
		return estimate{base + b/2 + a.items, str(b, "a joined string")}, "union() concatenates " + a.why
	case "max", "min", "mean", "sum":
		return estimate{base + 2*a.items + float64(len(n.Arguments)), scalar}, n.Name + "() reads " + a.why
	case "median":
		return estimate{base + a.items*(3+log2(a.items)), scalar}, "median() sorts " + a.why
	case "keys", "values", "toPairs", "fromPairs", "reverse":
		return estimate{base + 3*a.items, &shape{items: a.items, elem: a.element(), bytes: a.bytes, why: a.why}}, n.Name + "() copies " + a.why
	case "take":
		return estimate{base + a.items, a}, "take() copies " + a.why
	case "uniq":
		// expr compares every element with every distinct one kept so far.
		return estimate{base + a.items*a.items*(1+a.element().text()/256), a}, "uniq() compares every pair of " + a.why
	case "concat":
		out := &shape{why: "concatenated lists"}
		for _, s := range shapes {
			out.items += s.items
			out.bytes += s.bytes
			out.elem = union(out.elem, s.element())
		}
		return estimate{base + out.items, out}, "concat() copies " + a.why
	case "flatten":
		items := a.text() / 2
		return estimate{base + items, &shape{items: items, bytes: a.text(), elem: a.element().element(), why: "a flattened list"}}, "flatten() copies " + a.why
	case "sort":
		return estimate{base + a.items*(3+3*log2(a.items)), a}, "sort() sorts " + a.why
	}
	// A builtin without a model: bounded by what it reads, conservatively.
	return estimate{base + a.text(), w.c.record()}, n.Name + "() reads " + a.why
}

// loop estimates a builtin that runs a predicate per element of its first
// argument: the predicate's cost counts once per element.
func (w *estimator) loop(call *ast.BuiltinNode) (estimate, string) {
	coll := w.walk(call.Arguments[0])
	n := coll.sh.count()
	elem := coll.sh.element()
	w.ptrs = append(w.ptrs, elem)
	var acc estimate
	if call.Name == "reduce" {
		if len(call.Arguments) > 2 {
			acc = w.walk(call.Arguments[2])
		}
		// The accumulator can grow with every element it takes in.
		w.accs = append(w.accs, union(acc.sh, within(n*elem.text()+acc.sh.text(), "an accumulator")))
	}
	body := w.walk(call.Arguments[1])
	var mapped estimate
	if call.Map != nil { // filter and map fused by the optimizer
		w.ptrs[len(w.ptrs)-1] = elem
		mapped = w.walk(call.Map)
	}
	w.ptrs = w.ptrs[:len(w.ptrs)-1]
	if call.Name == "reduce" {
		w.accs = w.accs[:len(w.accs)-1]
	}
	per := body.cost + mapped.cost + 1
	cost := coll.cost + acc.cost + n*per + 2
	var sh *shape = scalar
	switch call.Name {
	case "filter":
		cost += n
		sh = coll.sh
		if call.Map != nil {
			sh = &shape{items: n, elem: mapped.sh, why: coll.sh.why}
		}
	case "map":
		cost += n
		sh = &shape{items: n, elem: body.sh, why: coll.sh.why}
	case "find", "findLast":
		sh = elem
	case "groupBy":
		cost += 3 * n
		sh = &shape{items: n, elem: coll.sh, why: coll.sh.why}
	case "sortBy":
		cost += n * 3 * log2(n)
		sh = coll.sh
	case "reduce":
		sh = union(body.sh, acc.sh)
	}
	return estimate{cost, sh}, fmt.Sprintf("%s() runs its predicate once per element of %s, %s units each", call.Name, coll.sh.why, units(per))
}

func log2(n float64) float64 { return math.Log2(max(n, 2)) }

// checkLimits checks the document's limits section.
func (c *compiler) checkLimits(fail func(string, error)) {
	l := c.doc.Limits
	if l == nil {
		return
	}
	switch {
	case l.Cost < 0:
		fail("limits.cost", errors.New("must be positive"))
	case l.Cost > MaxCostBudget:
		fail("limits.cost", fmt.Errorf("%d is over the ceiling of %d (about 10 ms per expression per event)", l.Cost, MaxCostBudget))
	}
}
