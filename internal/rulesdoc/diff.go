package rulesdoc

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Index is a document's items as canonical JSON, for comparisons and
// listings. Immutable once built.
type Index struct {
	Items map[string]map[string]json.RawMessage // kind -> name -> item
	Err   error                                 // the document did not parse
}

// BuildIndex indexes a document (YAML or JSON); a document that does not
// parse gives an Index with Err set. An empty src gives an empty Index.
func BuildIndex(src []byte) *Index {
	doc, err := Parse(src)
	if err != nil {
		return &Index{Err: err}
	}
	ix := &Index{Items: map[string]map[string]json.RawMessage{}}
	for k := range doc {
		items := doc.Items(k)
		if items == nil {
			continue
		}
		m := make(map[string]json.RawMessage, len(items))
		for name, item := range items {
			raw, err := Canonical(item)
			if err != nil {
				return &Index{Err: err}
			}
			m[name] = raw
		}
		ix.Items[k] = m
	}
	return ix
}

// Get returns an item's canonical JSON, or nil.
func (ix *Index) Get(kind, name string) json.RawMessage {
	if ix == nil || ix.Items == nil {
		return nil
	}
	return ix.Items[kind][name]
}

// Change is one item-level difference between two documents.
type Change struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Op   string `json:"op"` // Added, Removed or Changed
	// Item is the new content of an added item, the old one of a removed one.
	Item json.RawMessage `json:"item,omitempty"`
	// Fields are the top-level fields of a changed item that differ.
	Fields map[string]FieldChange `json:"fields,omitempty"`
}

// Change operations.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// FieldChange is a field's value before and after; absent when the field
// was not set.
type FieldChange struct {
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
}

// Diff lists what changed from a to b, by kind (in kinds' order, then any
// other key of either document, sorted) and name. It is never nil.
func Diff(kinds []Kind, a, b *Index) []Change {
	order := make([]string, 0, len(kinds))
	for _, k := range kinds {
		order = append(order, k.Plural)
	}
	for k := range b.Items {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	for k := range a.Items {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order[len(kinds):], strings.Compare)
	changes := []Change{}
	for _, k := range order {
		names := slices.Sorted(maps.Keys(b.Items[k]))
		for name := range a.Items[k] {
			if _, ok := b.Items[k][name]; !ok {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			before, after := a.Get(k, name), b.Get(k, name)
			switch {
			case before == nil:
				changes = append(changes, Change{Kind: k, Name: name, Op: Added, Item: after})
			case after == nil:
				changes = append(changes, Change{Kind: k, Name: name, Op: Removed, Item: before})
			case !bytes.Equal(before, after):
				changes = append(changes, Change{Kind: k, Name: name, Op: Changed, Fields: diffFields(before, after)})
			}
		}
	}
	return changes
}

func diffFields(before, after json.RawMessage) map[string]FieldChange {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(before, &a) != nil || json.Unmarshal(after, &b) != nil {
		return map[string]FieldChange{"": {From: before, To: after}} // not objects
	}
	out := map[string]FieldChange{}
	for _, f := range slices.Sorted(maps.Keys(a)) {
		if !bytes.Equal(a[f], b[f]) {
			out[f] = FieldChange{From: a[f], To: b[f]}
		}
	}
	for f, v := range b {
		if _, ok := a[f]; !ok {
			out[f] = FieldChange{To: v}
		}
	}
	return out
}

// DiffDocuments lists what changed from document a to document b (YAML or
// JSON; an empty one has no items), item by item. It fails when either
// does not parse.
func DiffDocuments(a, b []byte) ([]Change, error) {
	ia, ib := BuildIndex(a), BuildIndex(b)
	if ia.Err != nil {
		return nil, ia.Err
	}
	if ib.Err != nil {
		return nil, ib.Err
	}
	return Diff(Kinds(), ia, ib), nil
}

// Names lists the changes of one op as "kind/name" (for logs).
func Names(changes []Change, op string) []string {
	out := []string{}
	for _, c := range changes {
		if c.Op == op {
			out = append(out, c.Kind+"/"+c.Name)
		}
	}
	return out
}

// FieldNames returns the names of a changed item's fields that differ,
// sorted.
func (c Change) FieldNames() []string {
	return slices.Sorted(maps.Keys(c.Fields))
}
