package rules

import (
	"reflect"

	"github.com/expr-lang/expr/ast"
)

// The features of a rule are what its condition compares: each operand of a
// comparison (==, !=, <, <=, >, >=, in, matches, contains, startsWith,
// endsWith) that is not a literal, such as
// `len(uniq(map(history("transactions", "5m"), .ip)))` or `amount`. A rule
// with no comparison has its whole condition as its one feature. Explain
// evaluates them for a matched rule, so that a decision can say what the
// rule saw (the decision API's explainability).

// maxFeatures bounds the features kept per rule.
const maxFeatures = 16

// features returns the feature sources of a rule's condition.
func ruleFeatures(when *exprSource) []*exprSource {
	tree, err := parseGuarded(when.src)
	if err != nil {
		return nil
	}
	var out []*exprSource
	seen := map[string]bool{}
	add := func(n ast.Node) {
		if isLiteral(n) || len(out) >= maxFeatures {
			return
		}
		src := n.String()
		if seen[src] {
			return
		}
		seen[src] = true
		out = append(out, &exprSource{src: src, path: when.path, scope: when.scope, stream: when.stream, kind: reflect.Interface})
	}
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.BinaryNode:
			switch n.Operator {
			case "==", "!=", "<", "<=", ">", ">=", "in", "not in", "matches", "contains", "startsWith", "endsWith":
				add(n.Left)
				add(n.Right)
				return
			case "&&", "||", "and", "or":
				walk(n.Left)
				walk(n.Right)
				return
			}
		case *ast.UnaryNode:
			if n.Operator == "!" || n.Operator == "not" {
				walk(n.Node)
				return
			}
		}
		add(n)
	}
	walk(tree.Node)
	return out
}

func isLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode, *ast.ConstantNode:
		return true
	}
	return false
}

// Explain returns the values of rule r's features for the event v, by
// feature source; a feature that fails shows its error. It runs in the
// rule's context (history of the current key, as When). The feature
// programs are compiled on first use: only the decision API asks.
func (e *Evaluator) Explain(r int, v Fields) map[string]any {
	if e.features == nil {
		e.features = make(map[int][]program)
	}
	progs, ok := e.features[r]
	if !ok {
		c := &compiler{rs: e.rs, doc: e.rs.Doc}
		for _, s := range e.rs.Rules[r].features {
			p, _, err := c.compile(s, e.ctx)
			if err == nil {
				progs = append(progs, program{prog: p, src: s})
			}
		}
		e.features[r] = progs
	}
	out := make(map[string]any, len(progs))
	for _, p := range progs {
		val, err := e.run(p, v)
		if err != nil {
			out[p.src.src] = "error: " + err.Error()
			continue
		}
		out[p.src.src] = val
	}
	return out
}
