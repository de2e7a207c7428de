package jsonv

import (
	"encoding/json"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`null`, nil},
		{`true`, true},
		{`false`, false},
		{` 	
 0 `, 0.0},
		{`-0`, math.Copysign(0, -1)},
		{`42.5`, 42.5},
		{`-1.5e3`, -1500.0},
		{`1E+2`, 100.0},
		{`1e-2`, 0.01},
		{`0.1`, 0.1},
		{`1700000000123`, 1700000000123.0},
		{`9007199254740993`, 9007199254740992.0}, // rounds to even
		{`123456789012345678901234567890`, 1.2345678901234568e29},
		{`1.7976931348623157e308`, math.MaxFloat64},
		{`4.9406564584124654e-324`, 5e-324},
		{`1e-400`, 0.0}, // underflow is not an error, as in encoding/json
		{`""`, ""},
		{`"a\"b\\c\/d\be\ff\ng\rh\ti"`, "a\"b\\c/d\be\ff\ng\rh\ti"},
		{`"\u00e9\u20AC"`, "é€"},
		{`"\ud83d\ude00"`, "😀"},
		{`"\u0000"`, "\x00"},
		{"\"\xef\xbf\xbd\"", "\uFFFD"}, // U+FFFD itself is text like any other
		{`"\uFFFD\udbff\udfff"`, "\uFFFD\U0010FFFF"},
		{"\"\u2028\x7f\"", "\u2028\x7f"},
		{`[]`, []any{}},
		{`{}`, map[string]any{}},
		{`[1, "a" ,[null] , {"b" : false}]`, []any{1.0, "a", []any{nil}, map[string]any{"b": false}}},
		{`{"a":1,"a":2,"b":{"a":3}}`, map[string]any{"a": 2.0, "b": map[string]any{"a": 3.0}}},
		{`{"\u0061":1,"a":2}`, map[string]any{"a": 2.0}},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), nest(MaxDepth)},
	}
	for _, tt := range tests {
		got, err := Decode(tt.in)
		if err != nil {
			t.Errorf("Decode(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
			t.Errorf("Decode(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
		if f, ok := tt.want.(float64); ok && math.Signbit(f) != math.Signbit(got.(float64)) {
			t.Errorf("Decode(%q) = %v, want %v", tt.in, got, f)
		}
	}
}

func nest(depth int) any {
	v := []any{}
	for range depth - 1 {
		v = []any{v}
	}
	return v
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		in     string
		offset int
		msg    string
	}{
		{``, 0, msgEOF},
		{`   `, 3, msgEOF},
		{`nul`, 3, msgEOF},
		{`nulL`, 3, msgLiteral},
		{`True`, 0, msgValue},
		{`NaN`, 0, msgValue},
		{`-Infinity`, 1, msgDigit},
		{"\uFEFF1", 0, msgValue},
		{`1 2`, 2, msgTrailing},
		{`{}}`, 2, msgTrailing},
		{`01`, 1, msgTrailing},
		{`-`, 1, msgEOF},
		{`-a`, 1, msgDigit},
		{`1.`, 2, msgEOF},
		{`1.e5`, 2, msgDigit},
		{`.5`, 0, msgValue},
		{`+1`, 0, msgValue},
		{`1e`, 2, msgEOF},
		{`1e+`, 3, msgEOF},
		{`1e+x`, 3, msgDigit},
		{`0x10`, 1, msgTrailing},
		{`[1e400]`, 1, msgRange},
		{`-1e400`, 0, msgRange},
		{`1.7976931348623159e308`, 0, msgRange},
		{`[1,]`, 3, msgValue},
		{`[1 2]`, 3, msgArraySep},
		{`[`, 1, msgEOF},
		{`[1`, 2, msgEOF},
		{`{"a":1,}`, 7, msgKey},
		{`{"a" 1}`, 5, msgColon},
		{`{"tx_id":"t1","amount" 42.5}`, 23, msgColon},
		{`{"a":1 "b":2}`, 7, msgObjectSep},
		{`{a:1}`, 1, msgKey},
		{`{"a":}`, 5, msgValue},
		{`{"a"`, 4, msgEOF},
		{`"abc`, 4, msgEOF},
		{"\"a\tb\"", 2, msgControl},
		{"\"\xff\x01\"", 1, msgUTF8},
		{"\"a\x01\xff\"", 2, msgControl},
		{`"\x41"`, 2, msgEscape},
		{`"\'"`, 2, msgEscape},
		{`"\u12G4"`, 5, msgHex},
		{`"\u12`, 5, msgEOF},
		{`"\`, 2, msgEOF},
		{`"\ud800\u12"`, 1, msgSurrogate},
		// Text that is not Unicode: refused, not replaced (see the package doc).
		{"\"\xff\"", 1, msgUTF8},
		{"\"w\xfe\"", 2, msgUTF8},
		{"\"a\xe2\x82\"", 2, msgUTF8},
		{"\"\xed\xa0\x80\"", 1, msgUTF8},     // UTF-8 encoded surrogate
		{"\"\xc0\xaf\"", 1, msgUTF8},         // overlong
		{"\"\xf4\x90\x80\x80\"", 1, msgUTF8}, // beyond U+10FFFF
		{"\"\\n\xff\"", 3, msgUTF8},          // after an escape
		{"{\"\xff\":1}", 2, msgUTF8},
		{`"\ud800"`, 1, msgSurrogate},
		{`"ab\udc00\ud800"`, 3, msgSurrogate},
		{`"\ud800\u0041"`, 1, msgSurrogate},
		{`"\ud800\ud800\udc00"`, 1, msgSurrogate},
		{`"\ud800\\udc00"`, 1, msgSurrogate},
		{`{"tx_id":"w\uDFFF"}`, 11, msgSurrogate},
		{`[// comment` + "\n" + `1]`, 1, msgValue},
		{"\v1", 0, msgValue},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), MaxDepth, msgDepth},
		{strings.Repeat(`{"a":`, MaxDepth) + "{}" + strings.Repeat("}", MaxDepth), 5 * MaxDepth, msgDepth},
	}
	for _, tt := range tests {
		v, err := Decode(tt.in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Decode(%q) = %v, %v; want *SyntaxError", tt.in, v, err)
			continue
		}
		if v != nil {
			t.Errorf("Decode(%q) returned value %v with error", tt.in, v)
		}
		if se.Offset != tt.offset || se.Msg != tt.msg {
			t.Errorf("Decode(%q) error at %d %q, want at %d %q", tt.in, se.Offset, se.Msg, tt.offset, tt.msg)
		}
	}
}

func TestSyntaxErrorMessage(t *testing.T) {
	_, err := Decode(`{"tx_id":"t1","amount" 42.5}`)
	const want = "invalid JSON at offset 23: expected ':' after object key"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestDecodeDeepInputFailsFast(t *testing.T) {
	for _, open := range []string{"[", "{\"k\":", "[{\"k\":"} {
		s := strings.Repeat(open, 1_000_000)
		start := time.Now()
		_, err := Decode(s)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Msg != msgDepth {
			t.Errorf("Decode(%q x 1e6) error = %v, want depth error", open, err)
		}
		if _, err := Skip(s); err == nil {
			t.Errorf("Skip(%q x 1e6) succeeded", open)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("deep input %q took %v", open, d)
		}
	}
}

// TestDecodeNoCopy checks that strings without escapes share the input.
func TestDecodeNoCopy(t *testing.T) {
	in := `{"k":"plain text","u":"déjà vu","e":"a\nb"}`
	v, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	inside := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		base := uintptr(unsafe.Pointer(unsafe.StringData(in)))
		return p >= base && p < base+uintptr(len(in))
	}
	for k, want := range map[string]bool{"k": true, "u": true, "e": false} {
		if got := inside(m[k].(string)); got != want {
			t.Errorf("value of %q shares input = %v, want %v", k, got, want)
		}
	}
	for key := range m {
		if !inside(key) {
			t.Errorf("key %q does not share input", key)
		}
	}
}

func TestDecodePrefix(t *testing.T) {
	tests := []struct {
		in   string
		want any
		n    int
	}{
		{`  {"a":1} {"b":2}`, map[string]any{"a": 1.0}, 9},
		{"12]", 12.0, 2},
		{"0123", 0.0, 1},
		{"truex", true, 4},
		{`"a"b`, "a", 3},
		{"[1] \n", []any{1.0}, 3},
		{"-1.5e+3,", -1500.0, 7},
	}
	for _, tt := range tests {
		got, n, err := DecodePrefix(tt.in)
		if err != nil || n != tt.n {
			t.Errorf("DecodePrefix(%q) = _, %d, %v; want n %d", tt.in, n, err, tt.n)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
			t.Errorf("DecodePrefix(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
		if sn, err := Skip(tt.in); sn != n || err != nil {
			t.Errorf("Skip(%q) = %d, %v; want %d", tt.in, sn, err, n)
		}
	}
	for _, in := range []string{"", "1.", "[1,", "1e999 "} {
		if v, n, err := DecodePrefix(in); err == nil || v != nil || n != 0 {
			t.Errorf("DecodePrefix(%q) = %v, %d, %v; want error", in, v, n, err)
		}
	}
}

func TestObject(t *testing.T) {
	in := ` {"amount": 42.5, "skip" : {"x":[1,2,{}]}, "a\u00e9":"v", "amount":1} tail`
	var keys []string
	var amount any
	n, err := Object(in, func(key, rest string) (int, error) {
		keys = append(keys, key)
		if key == "amount" && amount == nil {
			v, n, err := DecodePrefix(rest)
			amount = v
			return n, err
		}
		return Skip(rest)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Index(in, " tail"); n != want {
		t.Errorf("n = %d, want %d", n, want)
	}
	if diff := cmp.Diff([]string{"amount", "skip", "aé", "amount"}, keys, cmpOpts); diff != "" {
		t.Errorf("keys mismatch (-want +got):\n%s", diff)
	}
	if amount != 42.5 {
		t.Errorf("amount = %v", amount)
	}

	if n, err := Object(" {} ", nil); n != 3 || err != nil {
		t.Errorf("Object({}) = %d, %v", n, err)
	}

	skip := func(_, rest string) (int, error) { return Skip(rest) }
	for _, tt := range []struct {
		in     string
		offset int
		msg    string
	}{
		{`[1]`, 0, msgObjectStart},
		{``, 0, msgEOF},
		{`{"a":1,}`, 7, msgKey},
		{`{"a" 1}`, 5, msgColon},
		{`{"a":1 "b":2}`, 7, msgObjectSep},
		{`{"a":`, 5, msgEOF},
		{`{"a":1`, 6, msgEOF},
		{`{"\q":1}`, 3, msgEscape},
	} {
		n, err := Object(tt.in, skip)
		var se *SyntaxError
		if !errors.As(err, &se) || n != 0 || se.Offset != tt.offset || se.Msg != tt.msg {
			t.Errorf("Object(%q) = %d, %v; want error at %d %q", tt.in, n, err, tt.offset, tt.msg)
		}
	}

	// An error from fn is returned unchanged.
	errStop := errors.New("stop")
	if _, err := Object(`{"a":1}`, func(_, _ string) (int, error) { return 0, errStop }); err != errStop {
		t.Errorf("Object with failing fn = %v, want %v", err, errStop)
	}
	_, err = Object(`{"a":1.}`, skip)
	if se, ok := err.(*SyntaxError); !ok || se.Offset != 2 {
		t.Errorf("Object with bad value = %v, want error at offset 2 of rest", err)
	}
	// A count that does not fit the value is an error, not a panic.
	for _, bad := range []int{-1, 0, 3} {
		if _, err := Object(`{"a":1}`, func(_, _ string) (int, error) { return bad, nil }); err == nil {
			t.Errorf("Object with fn returning %d succeeded", bad)
		}
	}
}

// TestDecodeReuse checks that the pooled decoder state does not leak between
// calls, including after errors deep inside arrays and objects.
func TestDecodeReuse(t *testing.T) {
	for range 3 {
		if _, err := Decode(`[1,{"a":[2,3,{"b":"x"`); err == nil {
			t.Fatal("truncated input decoded")
		}
		v, err := Decode(`[{"c":[4]},5]`)
		if err != nil {
			t.Fatal(err)
		}
		want := []any{map[string]any{"c": []any{4.0}}, 5.0}
		if diff := cmp.Diff(want, v, cmpOpts); diff != "" {
			t.Fatalf("mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	// Warm the pool so its first allocation is not counted.
	if _, err := Decode(typicalRecord); err != nil {
		t.Fatal(err)
	}
	// 1 map (header and one group), 6 boxed strings, 2 boxed numbers.
	const maxAllocs = 10
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(typicalRecord) }); n > maxAllocs {
		t.Errorf("Decode(typical record) allocates %v times, want <= %d", n, maxAllocs)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Skip(typicalRecord) }); n != 0 {
		t.Errorf("Skip(typical record) allocates %v times, want 0", n)
	}
}

// TestDecodeDuplicateKeysMemory checks that an object made mostly of one
// repeated key decodes to a small map, not one sized for every member.
func TestDecodeDuplicateKeysMemory(t *testing.T) {
	const members = 1 << 17
	in := "{" + strings.Repeat(`"a":0,`, members) + `"b":true}`
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	v, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	retained := int64(heap()) - int64(before)
	if diff := cmp.Diff(map[string]any{"a": 0.0, "b": true}, v, cmpOpts); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
	runtime.KeepAlive(v)
	if retained > 1<<20 {
		t.Errorf("decoded map of 2 keys retains %d bytes", retained)
	}
}

// TestDecodeConcurrent shares the decoder pool between goroutines; run it
// with -race.
func TestDecodeConcurrent(t *testing.T) {
	inputs := []string{typicalRecord, nestedRecord, `[1,[2,[3,"x\n"]]]`, `{"a":{"b":[{"c":"d"}]}}`, `[1,{"a":[2`}
	want := make([]any, len(inputs))
	for i, in := range inputs {
		if err := json.Unmarshal([]byte(in), &want[i]); err != nil {
			want[i] = err
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				k := (g + i) % len(inputs)
				got, err := Decode(inputs[k])
				if _, bad := want[k].(error); bad != (err != nil) || (err == nil && !jsonEqual(want[k], got)) {
					t.Errorf("Decode(%q) = %v, %v; want %v", inputs[k], got, err, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
}
