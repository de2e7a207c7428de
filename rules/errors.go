package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a ruleset document: 1-based line and column.
type Pos struct {
	Line, Column int
}

// CompileError is one mistake in a ruleset document: where it is (the dotted
// path of the item, e.g. "rules.many_ips.when", and the line and column in the
// document) and what is wrong. Snippet, when set, shows the offending source line
// with a caret under the column.
type CompileError struct {
	Path    string
	Line    int
	Column  int
	Snippet string
	Err     error
}

func (e *CompileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%d:%d: %s: %v", e.Line, e.Column, e.Path, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// ErrorList is every mistake found in a document, in document order. Load
// returns it whole so that a user fixes all of them in one round.
type ErrorList []*CompileError

func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d errors:", len(l))
	for _, e := range l {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// sorted orders the list by position, then path, so output is stable.
func (l ErrorList) sorted() ErrorList {
	slices.SortStableFunc(l, func(a, b *CompileError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), cmp.Compare(a.Path, b.Path))
	})
	return l
}
