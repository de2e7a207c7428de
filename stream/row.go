package stream

import "unsafe"

// Row is a past event reduced to the fields that rules read from history
// (DESIGN §4 "Keep only the fields that rules read"). It is much smaller than
// the decoded map (a Go map reserves eight slots even for one field), and a
// small row keeps its values and their string bytes inside itself: scanning a
// key's history touches one allocation per event, which is what makes
// history features fast. Rows are immutable.
type Row struct {
	names  []string // shared by every row of a stream
	vals   []any    // inline[:n], or a separate slice for wide rows
	inline [rowInline]any
	bytes  [rowBytes]byte // string values that fit, copied here
}

const (
	rowInline = 3
	rowBytes  = 40
)

// NewRow builds a row from fields, keeping names (in that order) and copying
// string values so that a retained row does not pin the buffer the event was
// decoded from. A field absent from fields is absent from the row.
func NewRow(names []string, fields map[string]any) *Row {
	r := &Row{names: names}
	if len(names) <= rowInline {
		r.vals = r.inline[:len(names)]
	} else {
		r.vals = make([]any, len(names))
	}
	used := 0
	for i, n := range names {
		v, ok := fields[n]
		switch {
		case !ok:
			v = absent{}
		case isString(v):
			s := v.(string)
			if used+len(s) <= rowBytes && len(s) > 0 {
				copy(r.bytes[used:], s)
				v = unsafe.String(&r.bytes[used], len(s)) // r is immutable from here on
				used += len(s)
			} else {
				v = string([]byte(s))
			}
		}
		r.vals[i] = v
	}
	return r
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// absent marks a field the event did not have (as opposed to a JSON null).
type absent struct{}

// Get returns the value of field name, and whether the event had it.
func (r *Row) Get(name string) (any, bool) {
	for i, n := range r.names {
		if n == name {
			if _, ok := r.vals[i].(absent); ok {
				return nil, false
			}
			return r.vals[i], true
		}
	}
	return nil, false
}
