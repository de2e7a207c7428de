package jsonv

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects Decode accepts.
const MaxDepth = 128

// SyntaxError reports where and why a text is not JSON. Offset is a byte offset into the input.
type SyntaxError struct {
	Offset int    // byte offset of the offending byte, or the input length for a text that ends too early
	Msg    string // what is wrong, without the offset
}

// Error returns the message with its offset, such as
// "invalid JSON at offset 12: expected ':' after object key".
func (e *SyntaxError) Error() string {
	return "invalid JSON at offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Messages of SyntaxError. They are constants so that reporting an error
// allocates only the error itself.
const (
	msgEOF         = "unexpected end of input"
	msgValue       = "expected value"
	msgTrailing    = "unexpected data after top-level value"
	msgKey         = "expected string for object key"
	msgColon       = "expected ':' after object key"
	msgObjectSep   = "expected ',' or '}' after object member"
	msgArraySep    = "expected ',' or ']' after array element"
	msgDepth       = "nesting deeper than MaxDepth (128)"
	msgLiteral     = "invalid literal"
	msgControl     = "control character in string"
	msgEscape      = "invalid escape sequence in string"
	msgHex         = "invalid hex digit in \\u escape"
	msgDigit       = "expected digit in number"
	msgRange       = "number out of range of float64"
	msgObjectStart = "expected '{' at start of object"
	msgUTF8        = "invalid UTF-8 in string"
	msgSurrogate   = "unpaired UTF-16 surrogate in \\u escape"
)

func syntaxError(off int, msg string) *SyntaxError {
	return &SyntaxError{Offset: off, Msg: msg}
}

// expected reports that s[i] is not what msg says was expected, or that s
// ended before it.
func expected(s string, i int, msg string) *SyntaxError {
	if i >= len(s) {
		return syntaxError(len(s), msgEOF)
	}
	return syntaxError(i, msg)
}

// Byte classes.
var (
	// isSpace holds the JSON whitespace bytes.
	isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}
	// plainASCII holds the bytes that stand for themselves in a string and
	// need no UTF-8 check: printable ASCII (DEL included) except '"' and
	// '\\'. Decoding keeps them as they are and encoding writes them unescaped.
	plainASCII [256]bool
	// hexVal maps hex digits to their value and other bytes to -1.
	hexVal [256]int8
)

func init() {
	for c := range 256 {
		plainASCII[c] = c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf
		hexVal[c] = -1
	}
	for c := '0'; c <= '9'; c++ {
		hexVal[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		hexVal[c] = int8(c - 'a' + 10)
		hexVal[c-'a'+'A'] = int8(c - 'a' + 10)
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace[s[i]] {
		i++
	}
	return i
}

// decoder holds the state of one Decode or DecodePrefix call. Its stacks
// collect the elements of the arrays and objects being decoded, so that each
// []any and map[string]any is allocated once at its final size. Entries past
// the length of a stack are always zero, so a pooled decoder holds no
// references into old inputs.
type decoder struct {
	s     string
	depth int
	elems []any
	kvs   []objMember
	strs  []string  // string members of the objects being decoded
	nums  []float64 // number members of the objects being decoded
	buf   []byte    // scratch for unescaping strings
	only  []string  // the top-level object's members to keep; nil: all
	slots []any     // where they go instead of a map (DecodePrefixSlots)
	isObj bool      // the top-level value was an object decoded into slots
	// limit, when positive, bounds the text of the top-level object's kept
	// members that only names, or that bounded names when only is nil
	// (DecodeSlotsBounded, DecodeOnlyBounded).
	limit   int
	bounded []string
}

// MemberTooLongError is the error of a bounded decode (DecodeSlotsBounded,
// DecodeOnlyBounded): a bounded member of the top-level object whose value
// is longer than the limit, as JSON text.
type MemberTooLongError struct {
	Key          string
	Bytes, Limit int
}

func (e *MemberTooLongError) Error() string {
	return fmt.Sprintf("field %q is %d bytes, more than the limit of %d", e.Key, e.Bytes, e.Limit)
}

// objMember is one member of an object being decoded: its value in v, or,
// for a string or number, its index in the decoder's strs or nums stack.
type objMember struct {
	k    string
	v    any
	kind memberKind
	idx  int
	slot int // in the top-level object of DecodePrefixSlots: the index of k in only
}

type memberKind uint8

const (
	memberAny memberKind = iota // the value is v
	memberStr                   // strs[idx]
	memberNum                   // nums[idx]
)

var decoderPool = sync.Pool{New: func() any { return new(decoder) }}

// maxPooledStack bounds the scratch a pooled decoder keeps, so one huge input
// does not pin memory for good.
const maxPooledStack = 1 << 12

func decodePrefix(s string, only []string) (any, int, error) {
	v, n, _, err := decodePrefixSlots(s, only, nil, 0, nil)
	return v, n, err
}

func decodePrefixSlots(s string, only []string, slots []any, limit int, bounded []string) (any, int, bool, error) {
	d := decoderPool.Get().(*decoder)
	d.s, d.only, d.slots, d.isObj, d.limit, d.bounded = s, only, slots, false, limit, bounded
	v, n, err := d.value(skipSpace(s, 0))
	if err != nil {
		// The error unwound past the frames that pop the stacks.
		clear(d.elems)
		clear(d.kvs)
		clear(d.strs)
		d.elems, d.kvs, d.strs, d.nums, d.depth = d.elems[:0], d.kvs[:0], d.strs[:0], d.nums[:0], 0
		v, n = nil, 0
	}
	isObj := d.isObj && err == nil
	d.s, d.only, d.slots, d.bounded = "", nil, nil, nil
	if cap(d.elems) <= maxPooledStack && cap(d.kvs) <= maxPooledStack && cap(d.strs) <= maxPooledStack &&
		cap(d.nums) <= maxPooledStack && cap(d.buf) <= 16*maxPooledStack {
		decoderPool.Put(d)
	}
	return v, n, isObj, err
}

// Decode decodes s, which must hold exactly one JSON value (surrounding whitespace allowed).
// Strings without escape sequences are substrings of s (no copy), so callers pass a string they keep.
// An error is a *SyntaxError.
func Decode(s string) (any, error) {
	v, n, err := decodePrefix(s, nil)
	if err == nil {
		err = endsAt(s, n)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// endsAt reports data after the value that ends at s[n], whitespace aside.
func endsAt(s string, n int) error {
	if n = skipSpace(s, n); n < len(s) {
		return syntaxError(n, msgTrailing)
	}
	return nil
}

// DecodeOnly is Decode keeping only the members of a top-level object that
// only names, when only is not nil (see DecodePrefixOnly).
func DecodeOnly(s string, only []string) (any, error) {
	v, n, err := decodePrefix(s, only)
	if err == nil {
		err = endsAt(s, n)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// DecodeSlots is Decode with the members of an object that names lists
// going into slots instead of a map (see DecodePrefixSlots).
func DecodeSlots(s string, names []string, slots []any) (v any, obj bool, err error) {
	v, n, obj, err := DecodePrefixSlots(s, names, slots)
	if err == nil {
		err = endsAt(s, n)
	}
	if err != nil {
		return nil, false, err
	}
	return v, obj, nil
}

// DecodePrefix decodes the first JSON value in s (after leading whitespace) and returns it with the number of bytes consumed (up to the end of the value).
// Whatever follows the value is not examined, except that a number ends at
// the first byte that cannot continue it: "12]" yields 12 and n == 2. On error
// n is 0 and err is a *SyntaxError.
func DecodePrefix(s string) (v any, n int, err error) {
	return decodePrefix(s, nil)
}

// DecodeNumberPrefix is DecodePrefix for a value expected to be a number,
// without boxing it: when the value (after leading whitespace) starts as a
// number does, it returns what DecodePrefix would (the float64, n and err),
// with ok true; otherwise ok is false and the caller decodes it some other
// way.
func DecodeNumberPrefix(s string) (f float64, n int, ok bool, err error) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '-' && (s[i] < '0' || s[i] > '9') {
		return 0, 0, false, nil
	}
	f, n, err = number(s, i)
	if err != nil {
		return 0, 0, true, err
	}
	return f, n, true, nil
}

// DecodePrefixOnly is DecodePrefix, except that when only is not nil, the
// members of the top-level object whose key it does not list are validated
// and skipped, not built: a caller that knows which fields it reads saves
// decoding, boxing and storing the others (nested objects are kept whole).
// What is accepted and rejected, and n, are the same as without it.
func DecodePrefixOnly(s string, only []string) (v any, n int, err error) {
	return decodePrefix(s, only)
}

// DecodePrefixSlots is DecodePrefixOnly with only set to names, except that
// when the value is an object, the member named names[i] goes into slots[i]
// (len(slots) == len(names)), a later duplicate replacing an earlier one,
// and no map is built: obj is true, v is nil, and slots of members the
// object lacks are left as they were. When the value is not an object, obj
// is false and v is the value. It accepts, rejects and measures as
// DecodePrefix does.
func DecodePrefixSlots(s string, names []string, slots []any) (v any, n int, obj bool, err error) {
	if names == nil {
		names = []string{} // nil would keep every member
	}
	return decodePrefixSlots(s, names, slots, 0, nil)
}

// DecodePrefixSlotsBounded is DecodePrefixSlots with DecodeSlotsBounded's
// limit on the kept members: a longer one fails the decode with a
// *MemberTooLongError (and n is 0).
func DecodePrefixSlotsBounded(s string, names []string, slots []any, limit int) (v any, n int, obj bool, err error) {
	if names == nil {
		names = []string{}
	}
	return decodePrefixSlots(s, names, slots, limit, nil)
}

// DecodePrefixOnlyBounded is DecodePrefixOnly with DecodeOnlyBounded's
// limit: a kept member (every one when only is not nil, else those bounded
// lists) longer than limit bytes fails the decode with a *MemberTooLongError
// (and n is 0).
func DecodePrefixOnlyBounded(s string, only, bounded []string, limit int) (v any, n int, err error) {
	v, n, _, err = decodePrefixSlots(s, only, nil, limit, bounded)
	return v, n, err
}

// DecodeSlotsBounded is DecodeSlots, except that a member names lists whose
// value is longer than limit bytes of JSON text fails the decode with a
// *MemberTooLongError. The check costs one comparison per kept member.
func DecodeSlotsBounded(s string, names []string, slots []any, limit int) (v any, obj bool, err error) {
	if names == nil {
		names = []string{}
	}
	v, n, obj, err := decodePrefixSlots(s, names, slots, limit, nil)
	if err == nil {
		err = endsAt(s, n)
	}
	if err != nil {
		return nil, false, err
	}
	return v, obj, nil
}

// DecodeOnlyBounded is DecodeOnly, except that a kept member of the
// top-level object whose value is longer than limit bytes of JSON text fails
// the decode with a *MemberTooLongError: every kept member when only is not
// nil, else the members bounded lists.
func DecodeOnlyBounded(s string, only, bounded []string, limit int) (any, error) {
	v, n, _, err := decodePrefixSlots(s, only, nil, limit, bounded)
	if err == nil {
		err = endsAt(s, n)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Skip validates the first JSON value in s without building it and returns the bytes consumed (like DecodePrefix).
// It accepts and rejects exactly what DecodePrefix does, including numbers out
// of range of float64 and nesting deeper than MaxDepth, and allocates only for
// an error.
func Skip(s string) (n int, err error) {
	n, err = skipValue(s, skipSpace(s, 0), 0)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Object calls fn for each member of the JSON object at the start of s (after whitespace), in order, with the decoded key and the text that starts at the member's value; fn returns how many bytes of that text the value occupies (it typically calls DecodePrefix or Skip on it) or an error, which Object returns. Object returns the bytes consumed up to the closing brace. A non-object is a *SyntaxError.
//
// rest starts at the first byte of the value (whitespace after the colon is
// skipped) and runs to the end of s. An error from fn is returned unchanged, so
// the offset of a *SyntaxError from DecodePrefix(rest) is relative to rest.
// fn is called for every member, duplicates included, before the text after
// the member is checked, so a syntax error late in the object surfaces only
// after fn has seen the members before it. A count outside [1, len(rest)] is an
// error. On error n is 0.
func Object(s string, fn func(key, rest string) (int, error)) (n int, err error) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return 0, expected(s, i, msgObjectStart)
	}
	d := decoder{s: s}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return 0, expected(s, i, msgKey)
		}
		key, j, err := d.str(i)
		if err != nil {
			return 0, err
		}
		if i = skipSpace(s, j); i >= len(s) || s[i] != ':' {
			return 0, expected(s, i, msgColon)
		}
		if i = skipSpace(s, i+1); i >= len(s) {
			return 0, syntaxError(len(s), msgEOF)
		}
		m, err := fn(key, s[i:])
		if err != nil {
			return 0, err
		}
		if m < 1 || m > len(s)-i {
			return 0, fmt.Errorf("jsonv: Object callback for key %q returned %d, outside [1, %d]", key, m, len(s)-i)
		}
		i = skipSpace(s, i+m)
		if i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
			continue
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		return 0, expected(s, i, msgObjectSep)
	}
}

// value decodes the value at s[i] and returns it with the offset just past
// it. s[i] is not whitespace.
func (d *decoder) value(i int) (any, int, error) {
	s := d.s
	if i >= len(s) {
		return nil, 0, syntaxError(len(s), msgEOF)
	}
	switch c := s[i]; c {
	case '"':
		str, j, err := d.str(i)
		if err != nil {
			return nil, 0, err
		}
		return str, j, nil
	case '{':
		return d.object(i)
	case '[':
		return d.array(i)
	case 't':
		j, err := literal(s, i, "true")
		return true, j, err
	case 'f':
		j, err := literal(s, i, "false")
		return false, j, err
	case 'n':
		j, err := literal(s, i, "null")
		return nil, j, err
	default:
		if c != '-' && (c < '0' || c > '9') {
			return nil, 0, syntaxError(i, msgValue)
		}
		f, j, err := number(s, i)
		if err != nil {
			return nil, 0, err
		}
		return f, j, nil
	}
}

// object decodes the object at s[i] == '{'.
//
// Its string and number members are boxed from one []string and one
// []float64 allocated for the whole object (see boxString), rather than one
// allocation each: a typical event is an object of a dozen such members, and
// these allocations were most of the cost of decoding it.
func (d *decoder) object(i int) (any, int, error) {
	if d.depth >= MaxDepth {
		return nil, 0, syntaxError(i, msgDepth)
	}
	d.depth++
	s := d.s
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		if d.depth == 1 && d.slots != nil {
			d.isObj = true
			d.depth--
			return nil, i + 1, nil
		}
		d.depth--
		return map[string]any{}, i + 1, nil
	}
	base, sbase, nbase := len(d.kvs), len(d.strs), len(d.nums)
	for {
		if i >= len(s) || s[i] != '"' {
			return nil, 0, expected(s, i, msgKey)
		}
		k, j, err := d.str(i)
		if err != nil {
			return nil, 0, err
		}
		if i = skipSpace(s, j); i >= len(s) || s[i] != ':' {
			return nil, 0, expected(s, i, msgColon)
		}
		i = skipSpace(s, i+1)
		var c byte
		if i < len(s) {
			c = s[i]
		}
		slot := -1
		if d.depth == 1 && d.only != nil {
			slot = slices.Index(d.only, k)
		}
		switch {
		case d.depth == 1 && d.only != nil && slot < 0:
			if j, err = skipValue(s, i, d.depth); err != nil {
				return nil, 0, err
			}
		case c == '"':
			var str string
			str, j, err = d.str(i)
			if err != nil {
				return nil, 0, err
			}
			d.kvs = append(d.kvs, objMember{k: k, kind: memberStr, idx: len(d.strs), slot: slot})
			d.strs = append(d.strs, str)
		case c == '-' || '0' <= c && c <= '9':
			var f float64
			f, j, err = number(s, i)
			if err != nil {
				return nil, 0, err
			}
			d.kvs = append(d.kvs, objMember{k: k, kind: memberNum, idx: len(d.nums), slot: slot})
			d.nums = append(d.nums, f)
		default:
			var v any
			v, j, err = d.value(i)
			if err != nil {
				return nil, 0, err
			}
			d.kvs = append(d.kvs, objMember{k: k, v: v, slot: slot})
		}
		if d.limit > 0 && d.depth == 1 && j-i > d.limit && (slot >= 0 || d.only == nil && slices.Contains(d.bounded, k)) {
			return nil, 0, &MemberTooLongError{Key: k, Bytes: j - i, Limit: d.limit}
		}
		if i = skipSpace(s, j); i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
			continue
		}
		if i < len(s) && s[i] == '}' {
			break
		}
		return nil, 0, expected(s, i, msgObjectSep)
	}
	members := d.kvs[base:]
	var strs []string
	var nums []float64
	if n := len(d.strs) - sbase; n > 0 {
		strs = make([]string, n)
		copy(strs, d.strs[sbase:])
	}
	if n := len(d.nums) - nbase; n > 0 {
		nums = make([]float64, n)
		copy(nums, d.nums[nbase:])
	}
	if d.depth == 1 && d.slots != nil { // the top-level object of DecodePrefixSlots
		d.fillSlots(members, strs, nums, sbase, nbase)
		d.isObj = true
		clear(members)
		clear(d.strs[sbase:])
		d.kvs, d.strs, d.nums = d.kvs[:base], d.strs[:sbase], d.nums[:nbase]
		d.depth--
		return nil, i + 1, nil
	}
	m := make(map[string]any, len(members))
	for _, e := range members {
		switch e.kind {
		case memberStr:
			m[e.k] = boxString(&strs[e.idx-sbase])
		case memberNum:
			m[e.k] = boxFloat(&nums[e.idx-nbase])
		default:
			m[e.k] = e.v
		}
	}
	if len(m) < len(members)/2 {
		// Mostly duplicate keys: do not hand back a map sized for all of
		// them, which hostile input could use to pin memory. (maps.Clone
		// would keep the size.) Nor the slabs of all their values: the
		// kept values are boxed anew.
		small := make(map[string]any, len(m))
		for k, v := range m {
			small[k] = rebox(v)
		}
		m = small
	}
	clear(members)
	clear(d.strs[sbase:])
	d.kvs, d.strs, d.nums = d.kvs[:base], d.strs[:sbase], d.nums[:nbase]
	d.depth--
	return m, i + 1, nil
}

// fillSlots stores the kept members of the top-level object in d.slots,
// later duplicates over earlier ones. Values are boxed from the object's
// slabs, unless duplicates make up most of them: then each kept value is
// boxed on its own, so that hostile input cannot pin large slabs.
func (d *decoder) fillSlots(members []objMember, strs []string, nums []float64, sbase, nbase int) {
	own := len(members) > 2*len(d.slots)
	for _, e := range members {
		var v any
		switch e.kind {
		case memberStr:
			v = boxString(&strs[e.idx-sbase])
		case memberNum:
			v = boxFloat(&nums[e.idx-nbase])
		default:
			v = e.v
		}
		if own {
			v = rebox(v)
		}
		d.slots[e.slot] = v
	}
}

// array decodes the array at s[i] == '['.
func (d *decoder) array(i int) (any, int, error) {
	if d.depth >= MaxDepth {
		return nil, 0, syntaxError(i, msgDepth)
	}
	d.depth++
	s := d.s
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		d.depth--
		return []any{}, i + 1, nil
	}
	base := len(d.elems)
	for {
		v, j, err := d.value(i)
		if err != nil {
			return nil, 0, err
		}
		d.elems = append(d.elems, v)
		if i = skipSpace(s, j); i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
			continue
		}
		if i < len(s) && s[i] == ']' {
			break
		}
		return nil, 0, expected(s, i, msgArraySep)
	}
	elems := d.elems[base:]
	a := make([]any, len(elems))
	copy(a, elems)
	clear(elems)
	d.elems = d.elems[:base]
	d.depth--
	return a, i + 1, nil
}

// literal checks that s[i:] starts with lit and returns the offset past it.
func literal(s string, i int, lit string) (int, error) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(s) {
			return 0, syntaxError(len(s), msgEOF)
		}
		if s[i+k] != lit[k] {
			return 0, syntaxError(i+k, msgLiteral)
		}
	}
	return i + len(lit), nil
}

// str decodes the string literal at s[i] == '"' and returns it with the
// offset past its closing quote.
func (d *decoder) str(i int) (string, int, error) {
	s := d.s
	j := i + 1
	for j < len(s) && plainASCII[s[j]] {
		j++
	}
	if j < len(s) && s[j] == '"' {
		return s[i+1 : j], j + 1, nil
	}
	return d.strSlow(i, j)
}

// strSlow continues str at s[j], the first byte that is not plain ASCII.
func (d *decoder) strSlow(i, j int) (string, int, error) {
	s := d.s
	// While the text needs no change, the result is a substring of s.
	for {
		if j >= len(s) {
			return "", 0, syntaxError(len(s), msgEOF)
		}
		c := s[j]
		if plainASCII[c] {
			j++
			continue
		}
		if c == '"' {
			return s[i+1 : j], j + 1, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", 0, syntaxError(j, msgControl)
		}
		r, size := utf8.DecodeRuneInString(s[j:])
		if r == utf8.RuneError && size == 1 {
			return "", 0, syntaxError(j, msgUTF8)
		}
		j += size
	}
	b := append(d.buf[:0], s[i+1:j]...)
	for {
		if j >= len(s) {
			return "", 0, syntaxError(len(s), msgEOF)
		}
		c := s[j]
		if plainASCII[c] {
			k := j + 1
			for k < len(s) && plainASCII[s[k]] {
				k++
			}
			b = append(b, s[j:k]...)
			j = k
			continue
		}
		if c == '"' {
			d.buf = b
			return string(b), j + 1, nil
		}
		if c < 0x20 {
			return "", 0, syntaxError(j, msgControl)
		}
		if c != '\\' {
			r, size := utf8.DecodeRuneInString(s[j:])
			if r == utf8.RuneError && size == 1 {
				return "", 0, syntaxError(j, msgUTF8)
			}
			b = append(b, s[j:j+size]...)
			j += size
			continue
		}
		r, n, err := unescapeRune(s, j)
		if err != nil {
			return "", 0, err
		}
		j += n
		b = utf8.AppendRune(b, r)
	}
}

// unescapeRune decodes the escape sequence at s[j] == '\\' as a code point:
// a \u escape of a high surrogate followed at once by one of a low surrogate
// is one code point (12 bytes). Any other surrogate escape is an error: the
// string would not be Unicode text (see the package documentation).
func unescapeRune(s string, j int) (rune, int, error) {
	r, n, err := unescape(s, j)
	if err != nil || !utf16.IsSurrogate(r) {
		return r, n, err
	}
	if r < 0xdc00 && j+7 < len(s) && s[j+6] == '\\' && s[j+7] == 'u' {
		if lo, m, err := unescape(s, j+6); err == nil && utf16.IsSurrogate(lo) && lo >= 0xdc00 {
			return utf16.DecodeRune(r, lo), n + m, nil
		}
	}
	return 0, 0, syntaxError(j, msgSurrogate)
}

// unescape decodes the escape sequence at s[j] == '\\' and returns the code
// unit it stands for and its length in bytes.
func unescape(s string, j int) (rune, int, error) {
	if j+1 >= len(s) {
		return 0, 0, syntaxError(len(s), msgEOF)
	}
	switch s[j+1] {
	case '"', '\\', '/':
		return rune(s[j+1]), 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		var r rune
		for k := j + 2; k < j+6; k++ {
			if k >= len(s) {
				return 0, 0, syntaxError(len(s), msgEOF)
			}
			h := hexVal[s[k]]
			if h < 0 {
				return 0, 0, syntaxError(k, msgHex)
			}
			r = r<<4 | rune(h)
		}
		return r, 6, nil
	}
	return 0, 0, syntaxError(j+1, msgEscape)
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// number decodes the number at s[i] and returns it with the offset past it.
func number(s string, i int) (float64, int, error) {
	end, f, exact, err := scanNumber(s, i)
	if err != nil || exact {
		return f, end, err
	}
	f, err = strconv.ParseFloat(s[i:end], 64)
	if err != nil {
		// The text is a valid number, so the only failure is overflow,
		// which encoding/json rejects too.
		return 0, 0, syntaxError(i, msgRange)
	}
	return f, end, nil
}

// scanNumber checks the number grammar at s[i] and returns the offset past
// the number. When the value can be computed exactly with one
// floating-point operation (digits that fit in 53 bits, a power of ten up to
// 1e22), which is then the correctly rounded result ParseFloat would return,
// it returns that value and exact == true.
func scanNumber(s string, i int) (end int, f float64, exact bool, err error) {
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	if i >= len(s) {
		return 0, 0, false, syntaxError(len(s), msgEOF)
	}
	var mant uint64 // the digits, meaningful while nd <= 19
	nd := 0         // significant digits seen, leading zeros excepted
	switch c := s[i]; {
	case c == '0':
		i++
	case c >= '1' && c <= '9':
		for ; i < len(s) && s[i]-'0' < 10; i++ {
			mant = mant*10 + uint64(s[i]-'0')
			nd++
		}
	default:
		return 0, 0, false, syntaxError(i, msgDigit)
	}
	exp := 0
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for ; i < len(s) && s[i]-'0' < 10; i++ {
			mant = mant*10 + uint64(s[i]-'0')
		}
		if i == start {
			return 0, 0, false, expected(s, i, msgDigit)
		}
		nd += i - start
		exp = start - i
	}
	if i < len(s) && s[i]|0x20 == 'e' {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		start := i
		e := 0
		for ; i < len(s) && s[i]-'0' < 10; i++ {
			if e < 1e6 {
				e = e*10 + int(s[i]-'0')
			}
		}
		if i == start {
			return 0, 0, false, expected(s, i, msgDigit)
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if nd > 19 || mant > 1<<53 || exp < -22 || exp > 22 {
		return i, 0, false, nil
	}
	f = float64(mant)
	if exp < 0 {
		f /= pow10[-exp]
	} else {
		f *= pow10[exp]
	}
	if neg {
		f = -f
	}
	return i, f, true, nil
}

// skipValue validates the value at s[i] at nesting depth depth and returns
// the offset past it.
func skipValue(s string, i, depth int) (int, error) {
	if i >= len(s) {
		return 0, syntaxError(len(s), msgEOF)
	}
	switch c := s[i]; c {
	case '"':
		return skipString(s, i)
	case '{':
		return skipObject(s, i, depth)
	case '[':
		return skipArray(s, i, depth)
	case 't':
		return literal(s, i, "true")
	case 'f':
		return literal(s, i, "false")
	case 'n':
		return literal(s, i, "null")
	default:
		if c != '-' && (c < '0' || c > '9') {
			return 0, syntaxError(i, msgValue)
		}
		_, j, err := number(s, i)
		return j, err
	}
}

func skipObject(s string, i, depth int) (int, error) {
	if depth >= MaxDepth {
		return 0, syntaxError(i, msgDepth)
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return 0, expected(s, i, msgKey)
		}
		j, err := skipString(s, i)
		if err != nil {
			return 0, err
		}
		if i = skipSpace(s, j); i >= len(s) || s[i] != ':' {
			return 0, expected(s, i, msgColon)
		}
		if j, err = skipValue(s, skipSpace(s, i+1), depth+1); err != nil {
			return 0, err
		}
		if i = skipSpace(s, j); i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
			continue
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		return 0, expected(s, i, msgObjectSep)
	}
}

func skipArray(s string, i, depth int) (int, error) {
	if depth >= MaxDepth {
		return 0, syntaxError(i, msgDepth)
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		return i + 1, nil
	}
	for {
		j, err := skipValue(s, i, depth+1)
		if err != nil {
			return 0, err
		}
		if i = skipSpace(s, j); i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
			continue
		}
		if i < len(s) && s[i] == ']' {
			return i + 1, nil
		}
		return 0, expected(s, i, msgArraySep)
	}
}

// skipString validates the string literal at s[i] == '"' and returns the
// offset past its closing quote.
//
// It checks what str checks, in the same order, so that the two accept and
// reject the same strings at the same offsets: the UTF-8 of every byte
// outside ASCII, and surrogate escapes.
func skipString(s string, i int) (int, error) {
	j := i + 1
	for {
		for j < len(s) && plainASCII[s[j]] {
			j++
		}
		if j >= len(s) {
			return 0, syntaxError(len(s), msgEOF)
		}
		switch c := s[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			_, n, err := unescapeRune(s, j)
			if err != nil {
				return 0, err
			}
			j += n
		case c < 0x20:
			return 0, syntaxError(j, msgControl)
		default:
			r, size := utf8.DecodeRuneInString(s[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, syntaxError(j, msgUTF8)
			}
			j += size
		}
	}
}

// eface is the layout of an interface{} value: its type and a pointer to
// its data. Boxing a string or float64 points the data word at a fresh
// copy; boxString and boxFloat point it at an element of a slab instead.
type eface struct {
	typ, data unsafe.Pointer
}

var (
	stringType = efaceOf(any("")).typ
	floatType  = efaceOf(any(0.0)).typ
)

func efaceOf(v any) eface { return *(*eface)(unsafe.Pointer(&v)) }

// boxString returns *p as an interface without copying it: the interface
// points at *p, which must never change afterwards (the slabs of object are
// written once, then only read through their interfaces).
func boxString(p *string) any {
	var v any
	*(*eface)(unsafe.Pointer(&v)) = eface{typ: stringType, data: unsafe.Pointer(p)}
	return v
}

// boxFloat is boxString for a float64.
func boxFloat(p *float64) any {
	var v any
	*(*eface)(unsafe.Pointer(&v)) = eface{typ: floatType, data: unsafe.Pointer(p)}
	return v
}

// rebox returns v boxed on its own when it points into a slab, so that it
// does not keep the rest of the slab alive.
func rebox(v any) any {
	switch x := v.(type) {
	case string:
		return any(x)
	case float64:
		return any(x)
	}
	return v
}
