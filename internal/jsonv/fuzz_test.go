package jsonv

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// decodeSeeds are interesting inputs for the fuzzers.
var decodeSeeds = []string{
	typicalRecord,
	``, ` `, `null`, `true`, `false`, `nul`, `tru`, `nulll`,
	`0`, `-0`, `-`, `01`, `1.`, `.1`, `1e5`, `1E-5`, `1e+5`, `1e`, `-1.5e-300`, `0.1`, `1e400`, `-1e400`, `1e-400`,
	`123456789012345678901234567890`, `9007199254740993`, `1.7976931348623157e308`, `1.7976931348623159e308`,
	`0.30000000000000004`, `1e23`, `8.98846567431158e307`, `2.2250738585072011e-308`, `1e22`, `1e-22`,
	`""`, `"abc"`, `"a\"b\\c\/d\be\ff\ng\rh\ti"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`,
	`"\ud800\ud800\udc00"`, `"\ud800\u0041"`, `"\ud800\u12"`, `"\u12G4"`, `"\x"`, `"\'"`, `"\`,
	"\"\xff\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"", "\"\xe2\x82\"", "\"\t\"", "\"\x7f\"", "\"\u2028\"",
	`[]`, `[1,2,3]`, `[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `[[[]]]`, `{}`, `{"a":1}`, `{"a":1,}`, `{"a"}`,
	`{"a":1,"a":2}`, `{"\u0061":1,"a":2}`, "{\"\xff\":1,\"\xfe\":2}", `{1:2}`, `{"a":{"b":[{"c":null}]}}`,
	" \t\r\n[ 1 , { \"a\" : [ ] } ] \t\r\n", "\v1", "\uFEFF1", `1 2`, `[1] x`, `NaN`, `Infinity`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1),
}

// FuzzDecode checks Decode against encoding/json: the same inputs are
// accepted, to equal values, apart from nesting deeper than MaxDepth and
// strings that are not Unicode text, which only Decode rejects. It also checks that DecodePrefix, Skip and Object
// agree with Decode, and that Append encodes what Decode returns as
// encoding/json does.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(s)
	}
	f.Fuzz(checkDecode)
}

// checkDecode is the body of FuzzDecode.
func checkDecode(t *testing.T, s string) {
	got, err := Decode(s)
	var want any
	wantErr := json.Unmarshal([]byte(s), &want)

	var se *SyntaxError
	if err != nil && (!errors.As(err, &se) || se.Offset < 0 || se.Offset > len(s)) {
		t.Fatalf("Decode(%q) error %#v is not a *SyntaxError within the input", s, err)
	}
	switch {
	case err != nil && se.Msg == msgDepth:
		checkTooDeep(t, s, se.Offset)
	case err != nil && (se.Msg == msgUTF8 || se.Msg == msgSurrogate):
		checkNotText(t, s, se)
	case (err == nil) != (wantErr == nil):
		t.Fatalf("Decode(%q) error = %v, encoding/json error = %v", s, err, wantErr)
	case err == nil:
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Fatalf("Decode(%q) mismatch (-encoding/json +jsonv):\n%s", s, diff)
		}
		// cmp treats -0 and 0 as equal; their encodings differ.
		wantJSON, werr := stdEncode(want)
		if werr != nil {
			t.Fatalf("encoding/json cannot encode its own result for %q: %v", s, werr)
		}
		if gotJSON := string(Append(nil, got)); gotJSON != wantJSON {
			t.Fatalf("Append(Decode(%q)) = %s, encoding/json: %s", s, gotJSON, wantJSON)
		}
	}

	// DecodePrefix and Skip see the same value, or fail the same way.
	pv, pn, perr := DecodePrefix(s)
	sn, serr := Skip(s)
	if !sameError(perr, serr) || pn != sn {
		t.Fatalf("DecodePrefix(%q) = %d, %v; Skip = %d, %v", s, pn, perr, sn, serr)
	}
	if err == nil {
		if perr != nil || pn != len(strings.TrimRight(s, " \t\r\n")) {
			t.Fatalf("DecodePrefix(%q) = %d, %v after Decode succeeded", s, pn, perr)
		}
		if diff := cmp.Diff(got, pv, cmpOpts); diff != "" {
			t.Fatalf("DecodePrefix(%q) mismatch (-Decode +DecodePrefix):\n%s", s, diff)
		}
	} else if se.Msg == msgTrailing {
		if perr != nil {
			t.Fatalf("DecodePrefix(%q) = %v, but Decode found only trailing data", s, perr)
		}
	} else if !sameError(err, perr) {
		t.Fatalf("DecodePrefix(%q) error = %v, Decode error = %v", s, perr, err)
	}

	// DecodeNumberPrefix agrees with DecodePrefix on whatever starts as a
	// number, and declines everything else.
	f, fn, isNum, ferr := DecodeNumberPrefix(s)
	if _, num := pv.(float64); num && !isNum {
		t.Fatalf("DecodeNumberPrefix(%q) declined the number %v", s, pv)
	}
	if isNum && (!sameError(ferr, perr) || fn != pn || ferr == nil && f != pv.(float64)) {
		t.Fatalf("DecodeNumberPrefix(%q) = %v, %d, %v; DecodePrefix = %v, %d, %v", s, f, fn, ferr, pv, pn, perr)
	}

	// DecodePrefixOnly keeps the top-level members only names, and
	// accepts, rejects and measures as DecodePrefix does.
	pm, isObject := pv.(map[string]any)
	onlies := [][]string{{}, {"a", "b"}}
	if isObject {
		keys := slices.Sorted(maps.Keys(pm))
		onlies = append(onlies, keys[:len(keys)/2])
	}
	for _, only := range onlies {
		ov, on, oerr := DecodePrefixOnly(s, only)
		if !sameError(oerr, perr) || on != pn {
			t.Fatalf("DecodePrefixOnly(%q, only %q) = %d, %v; DecodePrefix = %d, %v", s, only, on, oerr, pn, perr)
		}
		if perr != nil {
			continue
		}
		want := pv
		if isObject {
			kept := map[string]any{}
			for _, k := range only {
				if v, ok := pm[k]; ok {
					kept[k] = v
				}
			}
			want = kept
		}
		if diff := cmp.Diff(want, ov, cmpOpts); diff != "" {
			t.Fatalf("DecodePrefixOnly(%q, only %q) mismatch (-DecodePrefix filtered +DecodePrefixOnly):\n%s", s, only, diff)
		}

		// DecodePrefixSlots puts the same members in slots instead.
		type unset struct{}
		slots := make([]any, len(only))
		for i := range slots {
			slots[i] = unset{}
		}
		sv, sn, sobj, serr := DecodePrefixSlots(s, only, slots)
		if !sameError(serr, perr) || sn != pn || sobj != isObject {
			t.Fatalf("DecodePrefixSlots(%q, %q) = %d, %v, object %v; DecodePrefix = %d, %v", s, only, sn, serr, sobj, pn, perr)
		}
		if !isObject {
			if diff := cmp.Diff(pv, sv, cmpOpts); diff != "" {
				t.Fatalf("DecodePrefixSlots(%q) of a non-object mismatch (-DecodePrefix +DecodePrefixSlots):\n%s", s, diff)
			}
			continue
		}
		for i, name := range only {
			wv, ok := want.(map[string]any)[name]
			if !ok {
				if slots[i] != (unset{}) {
					t.Fatalf("DecodePrefixSlots(%q): slot %q = %v, but the object lacks it", s, name, slots[i])
				}
				continue
			}
			if diff := cmp.Diff(wv, slots[i], cmpOpts); diff != "" {
				t.Fatalf("DecodePrefixSlots(%q): slot %q mismatch (-DecodePrefixOnly +slot):\n%s", s, name, diff)
			}
		}
	}

	// Object, decoding each member with DecodePrefix, rebuilds the map, or
	// fails like DecodePrefix. (Nesting is the exception: fn decodes each
	// member from depth 0.)
	rebuilt := map[string]any{}
	on, oerr := Object(s, func(key, rest string) (int, error) {
		v, n, err := DecodePrefix(rest)
		rebuilt[key] = v
		return n, err
	})
	if m, ok := pv.(map[string]any); ok {
		if oerr != nil || on != pn {
			t.Fatalf("Object(%q) = %d, %v; DecodePrefix consumed %d", s, on, oerr, pn)
		}
		if diff := cmp.Diff(m, rebuilt, cmpOpts); diff != "" {
			t.Fatalf("Object(%q) mismatch (-DecodePrefix +Object):\n%s", s, diff)
		}
	} else if oerr == nil && (perr == nil || perr.(*SyntaxError).Msg != msgDepth) {
		t.Fatalf("Object(%q) succeeded; DecodePrefix = %v, %v", s, pv, perr)
	}
}

// checkTooDeep checks a depth error at s[off]: encoding/json's tokenizer
// must read s[:off+1] as a valid prefix that opens MaxDepth+1 levels.
func checkTooDeep(t *testing.T, s string, off int) {
	t.Helper()
	if off >= len(s) || (s[off] != '[' && s[off] != '{') {
		t.Fatalf("Decode(%q) reports nesting at offset %d, not at a bracket", s, off)
	}
	dec := json.NewDecoder(strings.NewReader(s[:off+1]))
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
	if depth != MaxDepth+1 || dec.InputOffset() != int64(off+1) {
		t.Fatalf("Decode(%q) reports nesting at offset %d, encoding/json reads depth %d up to %d", s, off, depth, dec.InputOffset())
	}
}

// checkNotText checks an error for a string that is not Unicode text at
// s[se.Offset]: a byte that does not start valid UTF-8, or a \u escape of a
// surrogate that no \u escape of a low surrogate follows at once.
func checkNotText(t *testing.T, s string, se *SyntaxError) {
	t.Helper()
	off := se.Offset
	switch se.Msg {
	case msgUTF8:
		if r, size := utf8.DecodeRuneInString(s[off:]); r != utf8.RuneError || size != 1 {
			t.Fatalf("Decode(%q) reports invalid UTF-8 at offset %d, where %q starts", s, off, s[off:min(off+4, len(s))])
		}
	case msgSurrogate:
		hex := func(at int) (rune, bool) {
			if at+6 > len(s) || s[at] != '\\' || s[at+1] != 'u' {
				return 0, false
			}
			r, err := strconv.ParseUint(s[at+2:at+6], 16, 16)
			return rune(r), err == nil
		}
		r, ok := hex(off)
		if !ok || !utf16.IsSurrogate(r) {
			t.Fatalf("Decode(%q) reports a surrogate at offset %d, where %q starts", s, off, s[off:min(off+6, len(s))])
		}
		if lo, ok := hex(off + 6); ok && r < 0xdc00 && lo >= 0xdc00 && lo < 0xe000 {
			t.Fatalf("Decode(%q) reports a surrogate at offset %d, which is half of a pair", s, off)
		}
	}
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// FuzzAppend checks Append and AppendString against encoding/json for
// strings (valid UTF-8 or not), numbers of every kind, and the values Decode
// returns, and checks that the output decodes back to an equal value with
// map keys in sorted order.
func FuzzAppend(f *testing.F) {
	for i, s := range decodeSeeds {
		f.Add(s, s, float64(i)*1.5, float32(i)/3, int64(-i), uint64(i)<<60)
	}
	f.Add(`{"b":1,"a":{"d":[],"c":"<>&"}}`, "\u2028\u2029<>&\x00\x1f", 1e21, float32(1e-7), int64(math.MinInt64), uint64(math.MaxUint64))
	f.Add(`[1e-7,1e21,-0,5e-324]`, "\xff\xfe\xed\xa0\x80", math.SmallestNonzeroFloat64, float32(math.MaxFloat32), int64(math.MaxInt64), uint64(0))
	f.Add(`{}`, "", math.NaN(), float32(math.Inf(-1)), int64(0), uint64(1))
	f.Fuzz(func(t *testing.T, data, s string, x float64, y float32, i int64, u uint64) {
		check := func(v any, wantValue any) {
			t.Helper()
			got := Append(nil, v)
			want, err := stdEncode(v)
			if err != nil {
				t.Fatalf("encoding/json cannot encode %#v: %v", v, err)
			}
			if string(got) != want {
				t.Fatalf("Append(%#v) = %s, encoding/json: %s", v, got, want)
			}
			var stdBack any
			if err := json.Unmarshal(got, &stdBack); err != nil {
				t.Fatalf("encoding/json rejects Append(%#v) = %s: %v", v, got, err)
			}
			if diff := cmp.Diff(wantValue, stdBack, cmpOpts); diff != "" {
				t.Fatalf("Append(%#v) = %s decodes to another value (-want +encoding/json):\n%s", v, got, diff)
			}
			back, err := Decode(string(got))
			if se := (*SyntaxError)(nil); errors.As(err, &se) && se.Msg == msgDepth {
				// Wrapping a value Decode accepted can nest it too deeply.
				checkTooDeep(t, string(got), se.Offset)
			} else if err != nil {
				t.Fatalf("Decode(Append(%#v)) = %v", v, err)
			} else if diff := cmp.Diff(stdBack, back, cmpOpts); diff != "" {
				t.Fatalf("Append(%#v) decodes differently (-encoding/json +jsonv):\n%s", v, diff)
			}
			checkSortedKeys(t, got)
		}

		if got, want := string(AppendString(nil, s)), string(Append(nil, s)); got != want {
			t.Fatalf("AppendString(%q) = %s, Append = %s", s, got, want)
		}
		// Each invalid byte comes back as U+FFFD, as converting to []rune does.
		fixed := string([]rune(s))
		check(s, fixed)

		if math.IsNaN(x) || math.IsInf(x, 0) {
			if got := string(Append(nil, x)); got != "null" {
				t.Fatalf("Append(%v) = %s, want null", x, got)
			}
		} else {
			check(x, x)
			check(map[string]float64{s: x}, map[string]any{fixed: x})
		}
		if math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
			if got := string(Append(nil, y)); got != "null" {
				t.Fatalf("Append(%v) = %s, want null", y, got)
			}
		} else {
			// The shortest digits for a float32 read back as float64 are
			// not float64(y), but they round to y.
			want, _ := stdEncode(y)
			back, _ := strconv.ParseFloat(want, 64)
			if float32(back) != y {
				t.Fatalf("Append(float32 %v) = %s does not round back", y, want)
			}
			check(y, back)
		}
		for _, n := range []any{i, int(i), int8(i), int16(i), int32(i), u, uint(u), uint8(u), uint16(u), uint32(u), uintptr(u)} {
			// Integers beyond 2^53 do not survive the float64 round trip;
			// compare with encoding/json's decoding of its own output.
			want, _ := stdEncode(n)
			var wantValue any
			_ = json.Unmarshal([]byte(want), &wantValue)
			check(n, wantValue)
		}
		check(map[string]int64{s: i, "k": -i}, map[string]any{fixed: float64(i), "k": float64(-i)})
		check([]string{s, data}, []any{fixed, string([]rune(data))})

		v, err := Decode(data)
		if err != nil {
			return
		}
		check(v, v)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			x = 0
		}
		check(map[string]any{s: v, "x": []any{v, x}}, map[string]any{fixed: v, "x": []any{v, x}})
	})
}
