package stream

import "unsafe"

// Row is a past event reduced to the fields that rules read from history
// (docs/design.md "History"), as an expression that reads past events'
// fields sees it. History keeps rows encoded (AppendRow) and DecodeRow
// builds them for such an expression. A Row is much smaller than the
// decoded map (a Go map reserves eight slots even for one field), and a
// small row keeps its values and their string bytes inside itself: one
// allocation per event read. Rows are immutable.
//
// A Row is 128 bytes, a size class whose objects start on a cache line: a
// scan reads names and then a value of inline from the same line (they come
// first for that), and a string of bytes from the next one.
type Row struct {
	names  []string // shared by every row of a stream
	inline [rowInline]any
	vals   []any          // inline[:n], or a separate slice for wide rows
	bytes  [rowBytes]byte // string values that fit, copied here
}

const (
	rowInline = 3
	rowBytes  = 32
)

// NewRow builds a row from fields, keeping names (in that order) and copying
// string values so that a retained row does not pin the buffer the event was
// decoded from. A field absent from fields is absent from the row.
func NewRow(names []string, fields map[string]any) *Row {
	r, used := newRow(names), 0
	for i, n := range names {
		v, ok := fields[n]
		used = r.set(i, v, ok, used)
	}
	return r
}

func newRow(names []string) *Row {
	r := &Row{names: names}
	if len(names) <= rowInline {
		r.vals = r.inline[:len(names)]
	} else {
		r.vals = make([]any, len(names))
	}
	return r
}

// set stores the value of names[i], ok false when the event lacks it, with
// used bytes of r.bytes taken so far; it returns the bytes taken after it.
func (r *Row) set(i int, v any, ok bool, used int) int {
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
	return used
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

// FieldReader reads one field from many rows, finding the field's position
// once per set of names instead of once per row: the rows of a stream share
// their names slice, so a scan over a key's history (a distinct count, say)
// compares names once, not at every row. The zero value is not usable; make
// one with NewFieldReader. Not safe for concurrent use.
type FieldReader struct {
	name  string
	names []string // the names of the last row read
	i     int      // the position of name in names, or -1
}

// NewFieldReader returns a reader of field name.
func NewFieldReader(name string) FieldReader { return FieldReader{name: name, i: -1} }

// Get returns what r.Get(f's name) does.
func (f *FieldReader) Get(r *Row) (any, bool) {
	if !sameSlice(r.names, f.names) {
		f.names, f.i = r.names, -1
		for i, n := range r.names {
			if n == f.name {
				f.i = i
				break
			}
		}
	}
	if f.i < 0 {
		return nil, false
	}
	var v any
	if len(f.names) <= rowInline {
		v = r.inline[f.i] // where vals points for a narrow row; saves reading vals
	} else {
		v = r.vals[f.i]
	}
	if _, ok := v.(absent); ok {
		return nil, false
	}
	return v, true
}

// sameSlice reports whether a and b are the same slice (not merely equal).
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
