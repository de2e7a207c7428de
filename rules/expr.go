package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
	"github.com/expr-lang/expr/vm/runtime"

	"github.com/vigil-cep/vigil/stream"
)

// Defences against hostile expressions, applied before expr parses a source:
// a length cap, a bracket-nesting cap (expr's parser recurses per level), a node
// cap for the compiled tree, and the history rules of checkCost.
const (
	MaxExprBytes = 4096
	MaxExprDepth = 64
	MaxExprNodes = 1000
)

// scope says where an expression sits, which decides what it may call.
type scope uint8

const (
	scopeRecord scope = iota // key, time, id: the event's fields and timestamp()
	scopeEvent               // window where and aggregate arguments: the event's fields
	scopeRule                // rule when and reason: the event's fields and history()
	scopeStep                // pattern step where and until: the event's fields and match
	scopeJoin                // join where and select: left and right
)

// Context is what the functions bound into an Evaluator's programs read. The
// task sets it before each evaluation; one task owns it.
type Context struct {
	// RecordTime is the Kafka record timestamp that timestamp() returns;
	// HasRecordTime is false when the record carried none.
	RecordTime    int64
	HasRecordTime bool
	// Match returns the events the partial match being extended has taken, by
	// step name (their field maps), for match.<step> in step conditions.
	Match func() map[string]any
	// History serves history(): the current key's past events.
	History History

	guard *Guard // nil: evaluations are not watched (guard.go)
	mark  uint64 // the rule evaluation under way, as marked on guard
}

// History is where history() reads the current key's events of a stream
// with event time in [t - window, t], t being the current event's time, in
// time order. The task knows which key and time are current.
type History interface {
	// Past returns the events' times and element-predicate results: all
	// that the native queries (count, any, all, none over a predicate of the
	// past event, len) read.
	Past(stream int, window int64) []Past
	// Values returns what history keeps of the same events, in the same
	// order: a Row of the fields rules read, or the whole field map. A task
	// keeps them encoded and builds them on each call, so only expressions
	// that read past events' fields call it.
	Values(stream int, window int64) []any
	// Failure returns the error of element predicate k on the ith of the
	// events Past returns, whose Mark says it failed (rare: a task keeps it
	// with the event's value).
	Failure(stream int, window int64, i, k int) string
}

// Past is one past event of a key as the native queries read it: its event
// time and its element-predicate results. A key's events of a stream are one
// slice of these, so that reading or adding one touches one array.
type Past struct {
	Time int64
	Mark Mark
}

// Recorded is a History that gives every stream and window the same events:
// for evaluations outside a task. A nil *Recorded holds none (an evaluator
// that evaluates no rule, such as a record extractor's).
type Recorded struct {
	Marks []Past
	Rows  []any      // Values, one per mark
	Errs  [][]string // the predicates' errors, one list per mark (Evaluator.Mark's)
}

// Add records an event: what history keeps of it, its marks and their
// errors.
func (r *Recorded) Add(value any, m Mark, errs []string) {
	r.Marks = append(r.Marks, Past{Mark: m})
	r.Rows = append(r.Rows, value)
	r.Errs = append(r.Errs, errs)
}

// Past returns every recorded event's marks.
func (r *Recorded) Past(int, int64) []Past {
	if r == nil {
		return nil
	}
	return r.Marks
}

// Values returns every recorded event's value.
func (r *Recorded) Values(int, int64) []any {
	if r == nil {
		return nil
	}
	return r.Rows
}

// Failure returns predicate k's error on the ith recorded event.
func (r *Recorded) Failure(_ int, _ int64, i, k int) string { return r.Errs[i][k] }

// historyRef is one history("stream", "window") call, resolved at load time.
type historyRef struct {
	stream int
	window int64
}

// exprSource is one expression of the ruleset, checked at load time and
// compiled again for each task (its functions close over the task's Context).
type exprSource struct {
	src    string
	path   string
	scope  scope
	stream int // the stream whose events are its environment
	kind   reflect.Kind
	// untyped compiles without the stream's declared fields (element
	// predicates keep the types their history elements had: unknown).
	untyped bool
	offset  int // of src within the document value (aggregate arguments)
	// refs are the history() calls found when it was first compiled (rules).
	refs []historyRef
	// field is set when the expression is a bare field name: the task reads the
	// map directly instead of running the VM.
	field string
	// matchItems bounds the events match.<step> holds (step conditions).
	matchItems float64
}

// compiler compiles expressions for one ruleset.
type compiler struct {
	rs  *Ruleset
	doc *Document
	// registering is set while a ruleset is loaded: history features may add
	// element predicates to its streams. Binding a loaded ruleset only looks
	// them up, so tasks can bind it concurrently.
	registering bool
}

// options returns the expr options for src bound to ctx.
func (c *compiler) options(s *exprSource, ctx *Context, refs *[]historyRef) []expr.Option {
	st := c.rs.Streams[s.stream]
	opts := []expr.Option{
		expr.DisableBuiltin("now"), // time is event time: decisions must replay identically
		expr.MaxNodes(MaxExprNodes),
		expr.Timezone("UTC"),
		expr.Function(fieldFunc, func(args ...any) (any, error) {
			if err := ctx.check(); err != nil {
				return nil, err
			}
			return fetchField(args...)
		}, new(func(any, string) any)),
	}
	if c.rs.noOptimize {
		opts = append(opts, expr.Optimize(false))
	}
	if s.scope == scopeJoin {
		opts = append(opts, expr.Env(map[string]any{"left": map[string]any{}, "right": map[string]any{}}))
	} else if st.fields != nil && !s.untyped {
		opts = append(opts, expr.Env(st.fields))
	} else {
		opts = append(opts, expr.Env(map[string]any{}), expr.AllowUndefinedVariables())
	}
	switch s.kind {
	case reflect.Bool:
		opts = append(opts, expr.AsBool())
	default:
		opts = append(opts, expr.AsAny())
	}
	switch s.scope {
	case scopeRecord:
		opts = append(opts, expr.Function("timestamp", func(...any) (any, error) {
			if !ctx.HasRecordTime {
				return nil, errors.New("the record has no timestamp")
			}
			return ctx.RecordTime, nil
		}, new(func() int64)))
	case scopeStep:
		opts = append(opts,
			expr.Function(matchFunc, func(...any) (any, error) {
				if err := ctx.check(); err != nil {
					return nil, err
				}
				return ctx.Match(), nil
			}, new(func() map[string]any)),
			expr.Patch(matchPatcher{}))
	case scopeRule:
		feats := featureFuncs(ctx)
		opts = append(opts,
			expr.Function("history", func(args ...any) (any, error) {
				if err := ctx.check(); err != nil {
					return nil, err
				}
				return ctx.History.Values(args[0].(int), int64(args[1].(int))), nil
			}, new(func(int, int) []any)),
			expr.Function(fnCount, feats[fnCount], new(func(int, int, int, int) int)),
			expr.Function(fnAny, feats[fnAny], new(func(int, int, int) bool)),
			expr.Function(fnAll, feats[fnAll], new(func(int, int, int) bool)),
			expr.Function(fnNone, feats[fnNone], new(func(int, int, int) bool)),
			expr.Function(fnDistinct, feats[fnDistinct], new(func(int, int, string, bool) int)),
		)
		if !c.rs.noFeatures {
			opts = append(opts, expr.Patch(&featurePatcher{c: c, register: c.registering, refs: refs}))
		}
		opts = append(opts, expr.Patch(&historyPatcher{c: c, refs: refs}))
	}
	return append(opts, expr.Patch(fieldPatcher{}))
}

// compile checks and compiles s for ctx. The returned error is positioned.
func (c *compiler) compile(s *exprSource, ctx *Context) (*vm.Program, []historyRef, error) {
	if err := c.precheck(s); err != nil {
		return nil, nil, err
	}
	var refs []historyRef
	prog, err := expr.Compile(s.src, c.options(s, ctx, &refs)...)
	if err != nil {
		return nil, nil, c.exprError(s, err)
	}
	if c.registering { // binding a loaded ruleset would find the same cost
		if err := c.checkCost(s, prog.Node()); err != nil {
			return nil, nil, err
		}
	}
	return prog, refs, nil
}

// precheck applies the defences that must run before (or instead of) expr's
// own compiler, and the history rules.
func (c *compiler) precheck(s *exprSource) error {
	if strings.TrimSpace(s.src) == "" {
		return c.at(s, 0, errors.New("expression is empty"))
	}
	if len(s.src) > MaxExprBytes {
		return c.at(s, 0, fmt.Errorf("expression is %d bytes, more than the limit of %d", len(s.src), MaxExprBytes))
	}
	if off, depth := nestingDepth(s.src); depth > MaxExprDepth {
		return c.at(s, off, fmt.Errorf("expression nests brackets more than %d deep", MaxExprDepth))
	}
	tree, err := parseGuarded(s.src) // checked above, with positions
	if err != nil {
		return c.exprError(s, err)
	}
	w := costWalker{c: c, s: s, histVars: map[string]bool{}}
	w.walk(tree.Node, 0)
	return w.err
}

// parseGuarded is parser.Parse behind the defences of precheck that must
// run before it: expr's parser recurses once per bracket, so a megabyte of
// them would overflow the stack. Every parse of a document's expression
// goes through it, the ones that re-read an expression for its fields
// too: those also run on expressions that failed their checks.
func parseGuarded(src string) (*parser.Tree, error) {
	if len(src) > MaxExprBytes {
		return nil, fmt.Errorf("expression is %d bytes, more than the limit of %d", len(src), MaxExprBytes)
	}
	if _, depth := nestingDepth(src); depth > MaxExprDepth {
		return nil, fmt.Errorf("expression nests brackets more than %d deep", MaxExprDepth)
	}
	return parser.Parse(src)
}

// nestingDepth returns the deepest bracket nesting of src outside string
// literals, and the offset where it is first exceeded (or reached).
func nestingDepth(src string) (offset, deepest int) {
	depth := 0
	var quote byte
	for i := 0; i < len(src); i++ {
		ch := src[i]
		if quote != 0 {
			switch {
			case ch == '\\' && quote != '`':
				i++
			case ch == quote:
				quote = 0
			}
			continue
		}
		switch ch {
		case '"', '\'', '`':
			quote = ch
		case '(', '[', '{':
			depth++
			if depth > deepest {
				deepest, offset = depth, i
				if depth > MaxExprDepth {
					return offset, deepest // no need to scan the rest of a hostile source
				}
			}
		case ')', ']', '}':
			depth--
		}
	}
	return offset, deepest
}

// costWalker enforces the evaluation-cost rules: history() takes literal
// arguments naming a known stream and a positive window, is called only where
// the scope allows, and never inside a predicate (directly or through a let
// variable), so one rule costs O(history) and not O(history²).
type costWalker struct {
	c        *compiler
	s        *exprSource
	histVars map[string]bool // let variables bound to history-derived values
	err      error
}

func (w *costWalker) fail(n ast.Node, err error) {
	if call, ok := n.(*ast.CallNode); ok {
		n = call.Callee // point at the function's name, not its parenthesis
	}
	if w.err == nil {
		w.err = w.c.at(w.s, n.Location().From, err)
	}
}

// walk visits n; inPred counts the predicates around it. It returns whether n
// contains a history() call or a history-valued variable.
func (w *costWalker) walk(n ast.Node, inPred int) bool {
	if n == nil || w.err != nil {
		return false
	}
	switch n := n.(type) {
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok {
			switch id.Value {
			case "history":
				w.checkHistoryCall(n, inPred)
				return true
			case "timestamp", matchFunc:
			default:
				// Without declared fields expr accepts any name, even as a
				// function: refuse calls that could only fail at run time.
				w.fail(n, fmt.Errorf("unknown function %s()", id.Value))
			}
		}
	case *ast.IdentifierNode:
		if w.histVars[n.Value] {
			if inPred > 0 {
				w.fail(n, fmt.Errorf("%s holds history(): it cannot be used inside a predicate (the cost would grow with the square of the history)", n.Value))
			}
			return true
		}
		return false
	case *ast.PredicateNode:
		return w.walk(n.Node, inPred+1)
	case *ast.VariableDeclaratorNode:
		if w.walk(n.Value, inPred) {
			w.histVars[n.Name] = true
		}
		return w.walk(n.Expr, inPred)
	case *ast.BuiltinNode:
		if n.Name == "now" {
			w.fail(n, errors.New("now() is not available: rules run in event time, so a replay decides the same way (use the event's time field)"))
		}
	}
	h := false
	for _, c := range children(n) {
		h = w.walk(c, inPred) || h
	}
	return h
}

func (w *costWalker) checkHistoryCall(n *ast.CallNode, inPred int) {
	if w.s.scope != scopeRule {
		w.fail(n, errors.New("history() is available in rule conditions and reasons only"))
		return
	}
	if inPred > 0 {
		w.fail(n, errors.New("history() cannot be called inside a predicate (the cost would grow with the square of the history)"))
		return
	}
	if _, err := w.c.resolveHistory(n); err != nil {
		w.fail(n, err)
	}
}

// resolveHistory reads the literal arguments of a history() call.
func (c *compiler) resolveHistory(n *ast.CallNode) (historyRef, error) {
	if len(n.Arguments) != 2 {
		return historyRef{}, fmt.Errorf(`history() takes 2 arguments ("stream", "window"), not %d`, len(n.Arguments))
	}
	name, ok1 := n.Arguments[0].(*ast.StringNode)
	win, ok2 := n.Arguments[1].(*ast.StringNode)
	if !ok1 || !ok2 {
		return historyRef{}, errors.New(`history() takes two string literals, e.g. history("transactions", "5m")`)
	}
	idx, ok := c.rs.streamIndex[name.Value]
	if !ok {
		return historyRef{}, fmt.Errorf("history(): unknown stream %q", name.Value)
	}
	d, err := parseDuration(win.Value)
	if err != nil {
		return historyRef{}, fmt.Errorf("history(): %w", err)
	}
	if d <= 0 {
		return historyRef{}, fmt.Errorf("history(): window %s must be positive", d)
	}
	return historyRef{stream: idx, window: int64(d)}, nil
}

// historyPatcher rewrites history("stream", "5m") into history(index, ms) so
// that the task does no parsing or lookup per call.
type historyPatcher struct {
	c    *compiler
	refs *[]historyRef
}

func (p *historyPatcher) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != "history" {
		return
	}
	ref, err := p.c.resolveHistory(call)
	if err != nil {
		return // precheck has reported it
	}
	*p.refs = append(*p.refs, ref)
	call.Arguments = []ast.Node{&ast.IntegerNode{Value: ref.stream}, &ast.IntegerNode{Value: int(ref.window)}}
}

// matchFunc serves match in step conditions: the identifier is rewritten
// into a call, because the environment is the event's own field map.
const matchFunc = "_vigil_match"

type matchPatcher struct{}

func (matchPatcher) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok && id.Value == "match" {
		ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: matchFunc}})
	}
}

// fieldFunc is the function fieldPatcher calls; the name cannot clash with an
// event field (expr identifiers cannot start with '$' except $env, so a name
// with a leading underscore and a suffix is used instead).
const fieldFunc = "_vigil_field"

// fieldPatcher rewrites x.name, where x is not statically typed (the event
// maps of history(), nested JSON objects), into _vigil_field(x, "name"). expr
// reads map members through reflection (runtime.Fetch, about 300 ns); the
// event maps are always map[string]any, which fetchField reads directly.
type fieldPatcher struct{}

func (fieldPatcher) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok || m.Optional || m.Method {
		return
	}
	name, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	if t := m.Node.Type(); t != nil && t.Kind() != reflect.Interface && t.Kind() != reflect.Map {
		return
	}
	call := &ast.CallNode{Callee: &ast.IdentifierNode{Value: fieldFunc}, Arguments: []ast.Node{m.Node, name}}
	ast.Patch(node, call)
}

// fetchField is x.name for a map[string]any x (nil when absent, as expr
// does), and expr's own member access for anything else.
func fetchField(args ...any) (any, error) {
	switch x := args[0].(type) {
	case map[string]any:
		return x[args[1].(string)], nil
	case *stream.Row:
		v, _ := x.Get(args[1].(string))
		return v, nil
	}
	if args[0] == nil {
		return nil, fmt.Errorf("cannot fetch %s from nil", args[1])
	}
	return runtime.Fetch(args[0], args[1]), nil
}

// identifiersRead lists the names an expression's identifiers use: the
// event's fields it reads, and (harmlessly, for callers that want a superset)
// function and variable names. env is true when it names $env, or cannot be
// parsed: then any field may be read.
func identifiersRead(src string) (names []string, env bool) {
	tree, err := parseGuarded(src)
	if err != nil {
		return nil, true
	}
	v := &identifierVisitor{seen: map[string]bool{}}
	ast.Walk(&tree.Node, v)
	return v.names, v.seen["$env"]
}

type identifierVisitor struct {
	seen  map[string]bool
	names []string
}

func (v *identifierVisitor) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok && !v.seen[id.Value] {
		v.seen[id.Value] = true
		v.names = append(v.names, id.Value)
	}
}

// fieldsRead lists the member names an expression reads (x.name, x["name"]),
// so that history keeps only those fields of past events. whole is true when
// the expression could see an event beyond those names: a computed member
// name, a bare # (the element itself), or a builtin that enumerates or
// serialises a value.
func fieldsRead(s *exprSource) (names []string, whole bool) {
	tree, err := parseGuarded(s.src)
	if err != nil {
		return nil, true
	}
	seen := map[string]bool{}
	var visit func(n ast.Node, parentMember bool)
	visit = func(n ast.Node, parentMember bool) {
		switch n := n.(type) {
		case nil:
		case *ast.MemberNode:
			if p, ok := n.Property.(*ast.StringNode); ok && !n.Optional && !n.Method {
				if !seen[p.Value] {
					seen[p.Value] = true
					names = append(names, p.Value)
				}
			} else {
				whole = true
			}
			visit(n.Node, true)
			visit(n.Property, false)
		case *ast.PointerNode:
			if !parentMember && n.Name == "" {
				whole = true
			}
		case *ast.BuiltinNode:
			switch n.Name {
			case "keys", "values", "toPairs", "toJSON", "get", "string", "type":
				whole = true
			}
			for _, a := range n.Arguments {
				visit(a, false)
			}
		default:
			for _, c := range children(n) {
				visit(c, false)
			}
		}
	}
	visit(tree.Node, false)
	return names, whole
}

// children returns the direct children of n for the node kinds that have any.
func children(n ast.Node) []ast.Node {
	switch n := n.(type) {
	case *ast.CallNode:
		return append([]ast.Node{n.Callee}, n.Arguments...)
	case *ast.UnaryNode:
		return []ast.Node{n.Node}
	case *ast.BinaryNode:
		return []ast.Node{n.Left, n.Right}
	case *ast.ChainNode:
		return []ast.Node{n.Node}
	case *ast.SliceNode:
		return []ast.Node{n.Node, n.From, n.To}
	case *ast.PredicateNode:
		return []ast.Node{n.Node}
	case *ast.ConditionalNode:
		return []ast.Node{n.Cond, n.Exp1, n.Exp2}
	case *ast.VariableDeclaratorNode:
		return []ast.Node{n.Value, n.Expr}
	case *ast.SequenceNode:
		return n.Nodes
	case *ast.ArrayNode:
		return n.Nodes
	case *ast.MapNode:
		return n.Pairs
	case *ast.PairNode:
		return []ast.Node{n.Key, n.Value}
	case *ast.BuiltinNode:
		return n.Arguments
	case *ast.MemberNode:
		return []ast.Node{n.Node, n.Property}
	}
	return nil
}

// exprError positions an error from expr's parser or checker in the document.
func (c *compiler) exprError(s *exprSource, err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		return c.at(s, fe.From, errors.New(fe.Message))
	}
	return c.at(s, 0, err)
}

// at builds a CompileError for s at byte offset off of its source.
func (c *compiler) at(s *exprSource, off int, err error) error {
	pos := c.doc.at(s.path)
	line, col := pos.Line, pos.Column
	if line > 0 {
		off = min(max(off, 0), len(s.src))
		before := s.src[:off]
		col += s.offset
		if nl := strings.LastIndexByte(before, '\n'); nl >= 0 {
			line += strings.Count(before, "\n")
			col = len([]rune(before[nl+1:])) + 1 + c.doc.indent(line)
		} else {
			col += len([]rune(before))
		}
	}
	e := &CompileError{Path: s.path, Line: line, Column: col, Err: err}
	if line > 0 && line <= len(c.doc.lines) {
		e.Snippet = snippet(c.doc.lines[line-1], col)
	}
	return e
}

// indent returns the indentation of a document line (block scalars).
func (doc *Document) indent(line int) int {
	if line < 1 || line > len(doc.lines) {
		return 0
	}
	l := doc.lines[line-1]
	return len(l) - len(strings.TrimLeft(l, " "))
}
