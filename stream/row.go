package stream

// Row is a past event reduced to the fields that rules read from history
// (DESIGN §4 "Keep only the fields that rules read"). It is much smaller than
// the decoded map (a Go map reserves eight slots even for one field), and its
// values sit next to it in memory, which is what makes scanning a key's
// history fast. Rows are immutable.
type Row struct {
	names []string // shared by every row of a stream
	vals  []any
}

// NewRow builds a row from fields, keeping names (in that order) and copying
// string values so that a retained row does not pin the buffer the event was
// decoded from. A field absent from fields is absent from the row.
func NewRow(names []string, fields map[string]any) *Row {
	r := &Row{names: names, vals: make([]any, len(names))}
	for i, n := range names {
		v, ok := fields[n]
		if !ok {
			r.vals[i] = absent{}
			continue
		}
		if s, isStr := v.(string); isStr {
			v = string([]byte(s))
		}
		r.vals[i] = v
	}
	return r
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
