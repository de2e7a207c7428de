package jsonv

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Raw is JSON text that Append writes verbatim (the caller guarantees it is valid JSON).
type Raw string

// maxAppendDepth is the nesting of []any and map[string]any past which
// Append checks the value for a cycle, as encoding/json does after 1000
// levels.
const maxAppendDepth = 1000

// Append appends the JSON encoding of v to dst. Deterministic: map keys sorted (bytewise), no HTML escaping
// (unlike encoding/json's default, '<' '>' '&' are written as is), invalid UTF-8 replaced by \ufffd, U+2028/U+2029 escaped as encoding/json does.
// Supported: nil, bool, string, Raw, float64, float32, all int and uint kinds, []any, []string, map[string]any, map[string]string, map[string]int64, map[string]float64, json.Number, time.Time (RFC 3339 nano, as encoding/json), and anything else through encoding/json.Marshal as a fallback (an error there becomes the JSON string of the error message, so Append never fails).
// Floats format exactly as encoding/json does (including 'e' form for very large/small exponents; NaN/Inf, which JSON cannot hold, become null).
//
// The output is what an encoding/json Encoder with SetEscapeHTML(false)
// writes, without its trailing newline; nil slices and maps are null as
// there. The fallback encodes with HTML escaping off as well. A value that
// contains itself through []any or map[string]any is a cycle, which
// encoding/json rejects: Append writes the error message for the whole v.
func Append(dst []byte, v any) []byte {
	if b, ok := appendValue(dst, v, 0); ok {
		return b
	}
	// v nests deeper than maxAppendDepth. Anything written past len(dst)
	// is overwritten below.
	if cyclic(v, nil) {
		return appendFallback(dst, v)
	}
	b, _ := appendValue(dst, v, math.MinInt) // a depth that cannot reach the limit
	return b
}

// appendValue appends v at nesting depth depth. It reports false if the
// nesting exceeds maxAppendDepth.
func appendValue(dst []byte, v any, depth int) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return AppendString(dst, x), true
	case float64:
		return appendFloat(dst, x, 64), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case map[string]any:
		return appendMapAny(dst, x, depth)
	case []any:
		return appendSliceAny(dst, x, depth)
	case Raw:
		return append(dst, x...), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case uintptr:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case float32:
		return appendFloat(dst, float64(x), 32), true
	case []string:
		if x == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, s)
		}
		return append(dst, ']'), true
	case map[string]string:
		return appendMap(dst, x, AppendString), true
	case map[string]int64:
		return appendMap(dst, x, appendInt64), true
	case map[string]float64:
		return appendMap(dst, x, appendFloat64), true
	case json.Number:
		return appendNumber(dst, x), true
	case time.Time:
		return appendTime(dst, x), true
	default:
		return appendFallback(dst, v), true
	}
}

func appendSliceAny(dst []byte, a []any, depth int) ([]byte, bool) {
	if a == nil {
		return append(dst, "null"...), true
	}
	if depth++; depth > maxAppendDepth {
		return dst, false
	}
	dst = append(dst, '[')
	for i, v := range a {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendValue(dst, v, depth); !ok {
			return dst, false
		}
	}
	return append(dst, ']'), true
}

func appendMapAny(dst []byte, m map[string]any, depth int) ([]byte, bool) {
	if m == nil {
		return append(dst, "null"...), true
	}
	if depth++; depth > maxAppendDepth {
		return dst, false
	}
	var buf [16]member[any]
	dst = append(dst, '{')
	for i, e := range sortedMembers(m, buf[:0]) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, e.k)
		dst = append(dst, ':')
		var ok bool
		if dst, ok = appendValue(dst, e.v, depth); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// appendMap appends a map whose values cannot nest.
func appendMap[V any](dst []byte, m map[string]V, appendElem func([]byte, V) []byte) []byte {
	if m == nil {
		return append(dst, "null"...)
	}
	var buf [16]member[V]
	dst = append(dst, '{')
	for i, e := range sortedMembers(m, buf[:0]) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, e.k)
		dst = append(dst, ':')
		dst = appendElem(dst, e.v)
	}
	return append(dst, '}')
}

// member is a map entry: one to encode, or a decoded object member waiting
// on the decoder's stack.
type member[V any] struct {
	k string
	v V
}

// sortedMembers appends the entries of m to members and sorts them by key,
// bytewise, as encoding/json orders them. Sorting entries rather than keys
// saves looking each key up again.
func sortedMembers[V any](m map[string]V, members []member[V]) []member[V] {
	for k, v := range m {
		members = append(members, member[V]{k, v})
	}
	if len(members) > 16 {
		slices.SortFunc(members, func(a, b member[V]) int { return strings.Compare(a.k, b.k) })
		return members
	}
	// Insertion sort: fastest for the few members of typical records.
	for i := 1; i < len(members); i++ {
		for j := i; j > 0 && members[j].k < members[j-1].k; j-- {
			members[j], members[j-1] = members[j-1], members[j]
		}
	}
	return members
}

func appendInt64(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

func appendFloat64(dst []byte, f float64) []byte { return appendFloat(dst, f, 64) }

// appendFloat formats f as encoding/json formats a float of the given bit
// size: like ES6, shortest digits, 'e' form below 1e-6 and from 1e21 on.
func appendFloat(dst []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(dst, "null"...)
	}
	// Integers below 1e15 have exactly their digits as shortest form.
	if bits == 64 && abs >= 1 && abs < 1e15 {
		if i := int64(f); float64(i) == f {
			return strconv.AppendInt(dst, i, 10)
		}
	}
	format := byte('f')
	if abs != 0 {
		// float32 cutoffs must be compared in float32.
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// Turn e-09 into e-9.
		if n := len(dst); dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendNumber appends n verbatim, as encoding/json does: "" is 0, and text
// that is not a JSON number is an error.
func appendNumber(dst []byte, n json.Number) []byte {
	if n == "" {
		return append(dst, '0')
	}
	if end, _, _, err := scanNumber(string(n), 0); err != nil || end != len(n) {
		return appendFallback(dst, n)
	}
	return append(dst, n...)
}

// appendTime appends t as time.Time.MarshalJSON does. The times that method
// rejects (years outside [0,9999], zone offsets of a day or more) go to
// encoding/json for its error message.
func appendTime(dst []byte, t time.Time) []byte {
	n := len(dst)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	b := dst[n+1:]
	if b[4] != '-' {
		return appendFallback(dst[:n], t)
	}
	if z := len(b) - len("Z07:00"); b[len(b)-1] != 'Z' && (b[z]-'0' < 10 || (b[z+1]-'0')*10+b[z+2]-'0' >= 24) {
		return appendFallback(dst[:n], t)
	}
	return append(dst, '"')
}

// appendFallback encodes v with encoding/json, HTML escaping off. An error is
// written as a JSON string holding its message.
func appendFallback(dst []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return AppendString(dst, err.Error())
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// container identifies a []any or map[string]any as encoding/json does for
// its cycle check: by data pointer, and for slices also by length.
type container struct {
	p uintptr
	n int
}

// cyclic reports whether v contains itself through []any and map[string]any
// values. path holds the containers enclosing v.
func cyclic(v any, path map[container]bool) bool {
	var c container
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return false
		}
		c = container{reflect.ValueOf(x).Pointer(), len(x)}
	case map[string]any:
		if len(x) == 0 {
			return false
		}
		c = container{reflect.ValueOf(x).Pointer(), 0}
	default:
		return false
	}
	if path[c] {
		return true
	}
	if path == nil {
		path = make(map[container]bool)
	}
	path[c] = true
	defer delete(path, c)
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if cyclic(e, path) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if cyclic(e, path) {
				return true
			}
		}
	}
	return false
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string literal (same escaping as Append).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if plainASCII[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript: escaped as encoding/json does.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
