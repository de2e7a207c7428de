// Package codec is the binary encoding of task state in checkpoints: varints,
// strings and the JSON-like values events carry. Every operator that owns
// state (history, windows, partial matches, join buffers, watermarks) writes
// itself with an Encoder and reads itself back with a Decoder, so that one
// set of rules — canonical varints, lengths checked against the bytes left,
// sorted map keys — holds for all of them.
//
// A Decoder never panics and never allocates more than its input justifies:
// the first error sticks, later reads return zero values, and Err reports
// it. Callers read a whole section and check Err once at the end.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
)

// ErrCorrupt is wrapped by every error a Decoder reports.
var ErrCorrupt = errors.New("codec: corrupt state")

// Value tags. Numbers are float64 as JSON decodes them; int64 is kept apart
// so that operators that store integers get integers back.
const (
	tagNull byte = iota
	tagFalse
	tagTrue
	tagFloat
	tagString
	tagArray
	tagObject
	tagInt
)

// maxDepth bounds the nesting of values Decode accepts (JSON input is bounded
// far below it by the record size).
const maxDepth = 1000

// Encoder appends encodings to a byte slice. The zero value is ready to use.
type Encoder struct {
	b []byte
}

// NewEncoder returns an Encoder that appends to b.
func NewEncoder(b []byte) *Encoder { return &Encoder{b: b} }

// Bytes returns what was encoded so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Uvarint writes u in canonical unsigned varint form.
func (e *Encoder) Uvarint(u uint64) { e.b = binary.AppendUvarint(e.b, u) }

// Varint writes v in zigzag varint form.
func (e *Encoder) Varint(v int64) { e.b = binary.AppendVarint(e.b, v) }

// Int writes a non-negative count or index.
func (e *Encoder) Int(n int) { e.Uvarint(uint64(n)) }

// Raw appends bytes that are already an encoding (read back with
// Decoder.Remaining): a history kept encoded is written as it is.
func (e *Encoder) Raw(b []byte) { e.b = append(e.b, b...) }

// Bool writes b as one byte.
func (e *Encoder) Bool(b bool) {
	if b {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// Float64 writes the IEEE 754 bits of f, so that every value (NaN payloads,
// -0) comes back exactly.
func (e *Encoder) Float64(f float64) {
	e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(f))
}

// String writes a length and the bytes of s.
func (e *Encoder) String(s string) {
	e.Int(len(s))
	e.b = append(e.b, s...)
}

// StringBytes writes b as String writes a string with its bytes.
func (e *Encoder) StringBytes(b []byte) {
	e.Int(len(b))
	e.b = append(e.b, b...)
}

// ByteSlice writes a length and b; Decoder.ByteSlice tells nil from empty.
func (e *Encoder) ByteSlice(b []byte) {
	if b == nil {
		e.Uvarint(0)
		return
	}
	e.Uvarint(uint64(len(b)) + 1)
	e.b = append(e.b, b...)
}

// Value writes a JSON-like value: nil, bool, float64, int64, string, []any
// and map[string]any (keys sorted, so the bytes depend only on the value).
// Any other type is an error: state must never be saved half understood.
func (e *Encoder) Value(v any) error {
	switch v := v.(type) {
	case nil:
		e.b = append(e.b, tagNull)
	case bool:
		if v {
			e.b = append(e.b, tagTrue)
		} else {
			e.b = append(e.b, tagFalse)
		}
	case float64:
		e.b = append(e.b, tagFloat)
		e.Float64(v)
	case int64:
		e.b = append(e.b, tagInt)
		e.Varint(v)
	case int:
		e.b = append(e.b, tagInt)
		e.Varint(int64(v))
	case string:
		e.b = append(e.b, tagString)
		e.String(v)
	case []any:
		e.b = append(e.b, tagArray)
		e.Int(len(v))
		for _, x := range v {
			if err := e.Value(x); err != nil {
				return err
			}
		}
	case map[string]any:
		e.b = append(e.b, tagObject)
		e.Int(len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			e.String(k)
			if err := e.Value(v[k]); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("codec: cannot encode a value of type %T", v)
	}
	return nil
}

// Decoder reads what an Encoder wrote. The first error sticks.
type Decoder struct {
	b     []byte
	err   error
	depth int
}

// NewDecoder returns a Decoder over b. Strings it returns are copies; b may
// be reused after decoding.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err returns the first error.
func (d *Decoder) Err() error { return d.err }

// Fail records an error found by the caller (an index out of range, an
// unknown kind), so that it is reported like a decoding error.
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

// Finish returns Err, or an error if bytes are left over.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.b) > 0 {
		d.Fail("%d bytes left after the end", len(d.b))
	}
	return d.err
}

// Remaining returns the bytes not read yet, aliasing the input: with the
// bytes before a read, it tells the caller which bytes the read took.
func (d *Decoder) Remaining() []byte { return d.b }

// Len returns how many bytes are left.
func (d *Decoder) Len() int { return len(d.b) }

// Uvarint reads a canonical unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	u, n := binary.Uvarint(d.b)
	if n <= 0 || n != UvarintLen(u) {
		d.Fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return u
}

// UvarintLen is the length of u's canonical (shortest) varint, which
// binary.AppendUvarint (Encoder.Uvarint) writes: computed rather than
// encoded, since encoding it allocated on every read (a tenth of a
// restore's time).
func UvarintLen(u uint64) int { return (bits.Len64(u|1) + 6) / 7 }

// VarintLen is the length of v as Encoder.Varint writes it.
func VarintLen(v int64) int { return UvarintLen(uint64(v)<<1 ^ uint64(v>>63)) }

// Varint reads a zigzag varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n != VarintLen(v) {
		d.Fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Int reads a non-negative int written by Encoder.Int.
func (d *Decoder) Int() int {
	u := d.Uvarint()
	if u > math.MaxInt32 {
		d.Fail("integer %d out of range", u)
		return 0
	}
	return int(u)
}

// Count reads a count of items that each take at least min bytes (min ≥ 1)
// and fails if the bytes left cannot hold them: a corrupt count never makes
// the caller allocate more than the input justifies.
func (d *Decoder) Count(min int) int {
	n := d.Int()
	if min < 1 {
		min = 1
	}
	if n > len(d.b)/min {
		d.Fail("count %d exceeds the %d bytes left", n, len(d.b))
		return 0
	}
	return n
}

// Bool reads one byte written by Encoder.Bool.
func (d *Decoder) Bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.Fail("bad bool")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// Float64 reads eight bytes written by Encoder.Float64.
func (d *Decoder) Float64() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.Fail("truncated float")
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

func (d *Decoder) raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.Fail("length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

// String reads a string written by Encoder.String.
func (d *Decoder) String() string { return string(d.raw(d.Int())) }

// ByteSlice reads bytes written by Encoder.ByteSlice (a copy; nil stays nil).
func (d *Decoder) ByteSlice() []byte {
	n := d.Uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	if n-1 > uint64(len(d.b)) {
		d.Fail("length %d exceeds the %d bytes left", n-1, len(d.b))
		return nil
	}
	return append([]byte{}, d.raw(int(n-1))...)
}

// StringBytes reads a string written by Encoder.String without copying it:
// the result aliases the decoder's input.
func (d *Decoder) StringBytes() []byte { return d.raw(d.Int()) }

// View reads bytes written by Encoder.ByteSlice without copying them: the
// result aliases the decoder's input (nil stays nil), for a caller that
// passes the bytes on (merging snapshots) rather than keeping them.
func (d *Decoder) View() []byte {
	n := d.Uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	if n-1 > uint64(len(d.b)) {
		d.Fail("length %d exceeds the %d bytes left", n-1, len(d.b))
		return nil
	}
	return d.raw(int(n - 1))
}

// SkipValue reads past a value written by Encoder.Value, checking it as
// Value does, without building it: a reader that keeps the encoding (a
// key's history) validates it at the cost of a scan.
func (d *Decoder) SkipValue() {
	if d.err != nil {
		return
	}
	if len(d.b) == 0 {
		d.Fail("truncated value")
		return
	}
	tag := d.b[0]
	d.b = d.b[1:]
	switch tag {
	case tagNull, tagFalse, tagTrue:
	case tagFloat:
		d.Float64()
	case tagInt:
		d.Varint()
	case tagString:
		d.raw(d.Int())
	case tagArray, tagObject:
		if d.depth >= maxDepth {
			d.Fail("values nested deeper than %d", maxDepth)
			return
		}
		d.depth++
		defer func() { d.depth-- }()
		if tag == tagArray {
			for range d.Count(1) {
				d.SkipValue()
			}
			return
		}
		var prev []byte
		for i := range d.Count(2) {
			k := d.raw(d.Int())
			if i > 0 && string(k) <= string(prev) {
				d.Fail("object keys not in increasing order")
				return
			}
			prev = k
			d.SkipValue()
		}
	default:
		d.Fail("unknown value tag %d", tag)
	}
}

// SkipValueString is SkipValue that also returns the value when it is a
// string, as a view of the decoder's input.
func (d *Decoder) SkipValueString() ([]byte, bool) {
	if s, ok := d.stringView(); ok {
		return s, true
	}
	d.SkipValue()
	return nil, false
}

// StringOrValue is Value for a caller that copies strings where it keeps
// them: a string comes back as a view of the decoder's input (isStr), any
// other value as Value builds it.
func (d *Decoder) StringOrValue() (v any, s []byte, isStr bool) {
	if s, ok := d.stringView(); ok {
		return nil, s, true
	}
	return d.Value(), nil, false
}

// stringView reads a string value as a view, when the next value is one.
func (d *Decoder) stringView() ([]byte, bool) {
	if d.err != nil || len(d.b) == 0 || d.b[0] != tagString {
		return nil, false
	}
	d.b = d.b[1:]
	s := d.raw(d.Int())
	return s, d.err == nil
}

// Value reads a value written by Encoder.Value.
func (d *Decoder) Value() any {
	if d.err != nil {
		return nil
	}
	if len(d.b) == 0 {
		d.Fail("truncated value")
		return nil
	}
	tag := d.b[0]
	d.b = d.b[1:]
	switch tag {
	case tagNull:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagFloat:
		return d.Float64()
	case tagInt:
		return d.Varint()
	case tagString:
		return d.String()
	case tagArray, tagObject:
		if d.depth >= maxDepth {
			d.Fail("values nested deeper than %d", maxDepth)
			return nil
		}
		d.depth++
		defer func() { d.depth-- }()
		if tag == tagArray {
			a := make([]any, d.Count(1))
			for i := range a {
				a[i] = d.Value()
			}
			return a
		}
		n := d.Count(2)
		m := make(map[string]any, n)
		prev := ""
		for i := range n {
			k := d.String()
			if i > 0 && k <= prev {
				d.Fail("object keys not in increasing order")
				return nil
			}
			prev = k
			m[k] = d.Value()
		}
		if d.err != nil {
			return nil
		}
		return m
	}
	d.Fail("unknown value tag %d", tag)
	return nil
}
