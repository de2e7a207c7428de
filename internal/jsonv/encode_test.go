package jsonv

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// stdEncode encodes v as an encoding/json Encoder with HTML escaping off,
// without the trailing newline.
func stdEncode(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

type point struct {
	X, Y int
	Tag  string `json:"tag,omitempty"`
}

type failingMarshaler struct{}

func (failingMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("boom") }

// TestAppendMatchesEncodingJSON checks byte equality with encoding/json for
// values it can encode.
func TestAppendMatchesEncodingJSON(t *testing.T) {
	zone := time.FixedZone("IST", 5*3600+30*60)
	values := []any{
		nil, true, false,
		"", "plain", `<a href="x">&amp;</a>`, "\x00\x01\x1f\x7f\b\f\n\r\t\"\\/", "\u2028 \u2029",
		"\xff\xfe", "a\xe2\x82", "\xed\xa0\x80", "\uFFFD", "é😀", "\u00a0\u200b\ufeff",
		0.0, math.Copysign(0, -1), 1.0, -1.0, 0.1, 42.5, 1700000000123.0, 1e15, 1e15 - 1, 1e15 + 1,
		1 << 53, -(1 << 53) + 1, 1e20, 1e21, 123456789e13, 1e-6, 9.99999e-7, 1e-7, 0.000001234,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 1.5e300, 2.5e-300,
		float32(0), float32(0.1), float32(1e21), float32(9.99e20), float32(1e-6), float32(1e-7),
		float32(16777217), float32(123456789012), float32(math.MaxFloat32), float32(-3.5),
		int(-7), int8(math.MinInt8), int16(math.MaxInt16), int32(math.MinInt32), int64(math.MinInt64),
		uint(7), uint8(255), uint16(math.MaxUint16), uint32(math.MaxUint32), uint64(math.MaxUint64), uintptr(12),
		[]any(nil), []any{}, []any{1.0, "a", nil, []any{true}, map[string]any{}},
		[]string(nil), []string{}, []string{"a", "<b>", "\xff"},
		map[string]any(nil), map[string]any{},
		map[string]any{"b": 1.0, "a": []any{"x"}, "": nil, "B": false, "é": 2.0, "\xff": 3.0, "aa": map[string]any{"z": 1.0, "y": 2.0}},
		map[string]string(nil), map[string]string{"k2": "v2", "k1": "<v1>"},
		map[string]int64(nil), map[string]int64{"max": math.MaxInt64, "min": math.MinInt64, "zero": 0},
		map[string]float64(nil), map[string]float64{"pi": math.Pi, "tiny": 1e-9, "big": 1e300},
		json.Number("12.5e-3"), json.Number(""), json.Number("-0"), json.Number("1e400"),
		time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC),
		time.Date(2024, 1, 2, 3, 4, 5, 120000000, zone),
		time.Date(1969, 12, 31, 23, 59, 59, 0, time.FixedZone("", -8*3600)),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Time{}, time.Now(),
		point{1, 2, "<t>"}, &point{X: 3}, []byte("bytes"), map[int]string{10: "a", 9: "b"},
		[]int{1, 2}, struct{ M map[string]any }{map[string]any{"b": 1, "a": 2}},
		[]any{point{}, json.Number("7"), int8(-1), float32(0.5), map[string]string{"x": "y"}},
		map[string]any{"t": time.Date(2020, 2, 29, 12, 0, 0, 0, time.UTC), "n": json.Number("3"), "f": float32(1.5)},
	}
	// Maps past the size Append sorts with insertion sort.
	big, bigStrings := map[string]any{}, map[string]string{}
	for i := range 40 {
		k := string(rune('z'-i%26)) + strings.Repeat("k", i%3) + string(rune('0'+i%10))
		big[k] = float64(i)
		bigStrings[k] = k
	}
	values = append(values, big, bigStrings)
	for _, v := range values {
		want, err := stdEncode(v)
		if err != nil {
			t.Errorf("encoding/json cannot encode %#v: %v", v, err)
			continue
		}
		if got := string(Append(nil, v)); got != want {
			t.Errorf("Append(%#v) = %s, want %s", v, got, want)
		}
		if s, ok := v.(string); ok {
			if got := string(AppendString(nil, s)); got != want {
				t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
			}
		}
	}
}

// TestAppendBeyondEncodingJSON covers values encoding/json rejects.
func TestAppendBeyondEncodingJSON(t *testing.T) {
	cyclicMap := map[string]any{"a": 1.0}
	cyclicMap["self"] = cyclicMap
	cyclicSlice := []any{nil, 1.0}
	cyclicSlice[0] = cyclicSlice
	tests := []struct {
		v    any
		want string
	}{
		{math.NaN(), `null`},
		{math.Inf(1), `null`},
		{[]any{math.Inf(-1), float32(math.Inf(1))}, `[null,null]`},
		{map[string]float64{"nan": math.NaN()}, `{"nan":null}`},
		{Raw(`{"x":[1, 2]}`), `{"x":[1, 2]}`},
		{[]any{Raw(`true`), map[string]any{"r": Raw(`"<raw>"`)}}, `[true,{"r":"<raw>"}]`},
		{make(chan int), `"json: unsupported type: chan int"`},
		{map[string]any{"c": func() {}, "ok": 1.0}, `{"c":"json: unsupported type: func()","ok":1}`},
		{failingMarshaler{}, `"json: error calling MarshalJSON for type jsonv.failingMarshaler: boom"`},
		{json.Number("12a"), `"json: invalid number literal \"12a\""`},
		{json.Number("01"), `"json: invalid number literal \"01\""`},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), `"json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]"`},
		{time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), `"json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]"`},
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)), `"json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: timezone hour outside of range [0,23]"`},
		{cyclicMap, `"json: unsupported value: encountered a cycle via map[string]interface {}"`},
		{cyclicSlice, `"json: unsupported value: encountered a cycle via []interface {}"`},
	}
	for _, tt := range tests {
		got := string(Append([]byte("prefix "), tt.v))
		if got != "prefix "+tt.want {
			t.Errorf("Append(%T) = %s, want prefix %s", tt.v, got, tt.want)
		}
		if !json.Valid([]byte(got[len("prefix "):])) {
			t.Errorf("Append(%T) = %s is not valid JSON", tt.v, got)
		}
	}
}

// TestAppendDeep checks values nested deeper than the depth at which Append
// looks for cycles: acyclic ones are still encoded by Append itself (Raw
// stays raw), and values that share containers without a cycle are fine.
func TestAppendDeep(t *testing.T) {
	const depth = 3 * maxAppendDepth
	var v any = Raw(`"raw"`)
	for i := range depth {
		if i%2 == 0 {
			v = []any{v}
		} else {
			v = map[string]any{"k": v}
		}
	}
	got := string(Append(nil, v))
	var want strings.Builder
	for i := depth - 1; i >= 0; i-- {
		if i%2 == 0 {
			want.WriteString("[")
		} else {
			want.WriteString(`{"k":`)
		}
	}
	want.WriteString(`"raw"`)
	for i := range depth {
		if i%2 == 0 {
			want.WriteString("]")
		} else {
			want.WriteString("}")
		}
	}
	if got != want.String() {
		t.Errorf("deep value encoded as %.80s..., want %.80s...", got, want.String())
	}

	shared := []any{1.0, 2.0}
	dag := []any{shared, shared[:1], map[string]any{"s": shared}}
	for range maxAppendDepth {
		dag = []any{dag, shared}
	}
	wantDAG, err := stdEncode(dag)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(Append(nil, dag)); got != wantDAG {
		t.Errorf("shared containers encoded as %.80s..., want %.80s...", got, wantDAG)
	}
}

func TestAppendSortsKeys(t *testing.T) {
	m := map[string]any{}
	for _, k := range []string{"zeta", "alpha", "Alpha", "a", "", "é", "_", "10", "9", "b\x00"} {
		m[k] = map[string]any{"y": 1.0, "x": 2.0, k: 3.0}
	}
	for range 10 { // map iteration order is random
		checkSortedKeys(t, Append(nil, m))
	}
}

// checkSortedKeys fails t unless the keys of every object in the JSON text
// b are in strictly increasing bytewise order.
func checkSortedKeys(t *testing.T, b []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		last   *string
		key    bool // the next token is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			if len(stack) != 0 {
				t.Fatalf("walking %s: %v", b, err)
			}
			return
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			top := &stack[n-1]
			if top.key {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:n-1]
					continue
				}
				k := tok.(string)
				if top.last != nil && *top.last >= k {
					t.Fatalf("keys %q, %q out of order in %s", *top.last, k, b)
				}
				top.last = &k
				top.key = false
				continue
			}
			top.key = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, key: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	v, err := Decode(typicalRecord)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = Append(buf[:0], v) }); n != 0 {
		t.Errorf("Append(typical record) allocates %v times, want 0", n)
	}
}
