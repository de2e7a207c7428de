package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
)

// Fields is one event's fields as expressions read them. An event of a
// stream with DecodeFields is decoded into slots, one per name in that
// order, rather than into a map: no map is built for it, and a compiled
// program reads a field by its index. Other events come as a map.
type Fields struct {
	Map   map[string]any // when Slots is nil
	Slots []any          // the values of Names; Absent for a field the event lacks
	Names []string
}

// Absent fills the slot of a field an event lacks (a JSON null is nil).
var Absent any = absentField{}

type absentField struct{}

// MapFields returns the Fields of a field map.
func MapFields(m map[string]any) Fields { return Fields{Map: m} }

// get returns the value of field name, nil when the event lacks it, as a
// map index does; slot is name's index in Names as the program expects it,
// or -1.
func (f Fields) get(name string, slot int) any {
	if f.Slots == nil {
		return f.Map[name]
	}
	if slot < 0 || slot >= len(f.Names) || f.Names[slot] != name {
		if slot = slices.Index(f.Names, name); slot < 0 {
			return nil // not decoded: no expression of the stream reads it
		}
	}
	if v := f.Slots[slot]; v != Absent {
		return v
	}
	return nil
}

// AsMap returns the fields as a map: Map, or one built from the slots, for
// expr's VM and for callers that want the whole event.
func (f Fields) AsMap() map[string]any {
	if f.Slots == nil {
		return f.Map
	}
	m := make(map[string]any, len(f.Slots))
	for i, v := range f.Slots {
		if v != Absent {
			m[f.Names[i]] = v
		}
	}
	return m
}

// warnUndeclared lists, for each stream that declares no fields, the event
// fields its rules read: nothing can check those names, so a misspelt one
// reads null at every decision. Declaring fields turns such a name into a
// load error (expr's checker knows the environment).
func (c *compiler) warnUndeclared() {
	for _, st := range c.rs.Streams {
		if !st.Input() || st.fields != nil || c.doc.Streams[st.Name] == nil {
			continue
		}
		seen := map[string]bool{}
		var names []string
		for _, r := range c.rs.Rules {
			if r.Stream != st.Index {
				continue
			}
			for _, s := range []*exprSource{&r.when, r.reason} {
				if s == nil {
					continue
				}
				for _, n := range topLevelFields(s.src) {
					if !seen[n] {
						seen[n] = true
						names = append(names, n)
					}
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		path := "streams." + st.Name
		pos := c.doc.at(path)
		c.rs.Warnings = append(c.rs.Warnings, &CompileError{Path: path, Line: pos.Line, Column: pos.Column,
			//lint:ignore ST1005 it ends with the key to write, "fields:"
			Err: fmt.Errorf("no fields declared: nothing checks that its events have %s, which its rules read (a misspelt name reads null at every decision); declare them under fields:", strings.Join(names, ", "))})
	}
}

// topLevelFields lists the event fields an expression names: identifiers
// that are neither functions nor let variables.
func topLevelFields(src string) []string {
	tree, err := parseGuarded(src)
	if err != nil {
		return nil
	}
	var out []string
	var visit func(n ast.Node, bound map[string]bool)
	visit = func(n ast.Node, bound map[string]bool) {
		switch n := n.(type) {
		case nil:
		case *ast.IdentifierNode:
			if !bound[n.Value] && n.Value != "$env" {
				out = append(out, n.Value)
			}
		case *ast.CallNode:
			for _, a := range n.Arguments {
				visit(a, bound)
			}
		case *ast.MemberNode:
			visit(n.Node, bound) // the property is a member name, not a field
			if _, ok := n.Property.(*ast.StringNode); !ok {
				visit(n.Property, bound)
			}
		case *ast.VariableDeclaratorNode:
			visit(n.Value, bound)
			inner := maps.Clone(bound)
			inner[n.Name] = true
			visit(n.Expr, inner)
		default:
			for _, ch := range children(n) {
				visit(ch, bound)
			}
		}
	}
	visit(tree.Node, map[string]bool{})
	return out
}
