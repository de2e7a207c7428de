package stream

import (
	"strings"
	"testing"
	"unsafe"
)

func TestRow(t *testing.T) {
	src := `{"ip":"10.0.0.1","long":"` + strings.Repeat("x", 64) + `"}`
	fields := map[string]any{"ip": src[7:15], "amount": 5.0, "nil": nil, "long": src[25 : 25+64]}
	for _, names := range [][]string{{"ip", "amount", "missing"}, {"ip", "amount", "nil", "long", "missing"}} {
		r := NewRow(names, fields)
		tests := []struct {
			name string
			v    any
			ok   bool
		}{
			{"ip", "10.0.0.1", true},
			{"amount", 5.0, true},
			{"missing", nil, false},
			{"other", nil, false},
		}
		if len(names) > 3 {
			tests = append(tests, struct {
				name string
				v    any
				ok   bool
			}{"nil", nil, true}, struct {
				name string
				v    any
				ok   bool
			}{"long", strings.Repeat("x", 64), true})
		}
		for _, tt := range tests {
			v, ok := r.Get(tt.name)
			if v != tt.v || ok != tt.ok {
				t.Errorf("%v: Get(%q) = %v, %v; want %v, %v", names, tt.name, v, ok, tt.v, tt.ok)
			}
		}
		if v, _ := r.Get("ip"); unsafe.StringData(v.(string)) == unsafe.StringData(src[7:]) {
			t.Errorf("the row shares the input's bytes")
		}
	}
}

// TestFieldReader checks that a FieldReader agrees with Get across rows of
// different names (narrow and wide), switching back and forth.
func TestFieldReader(t *testing.T) {
	fields := map[string]any{"ip": "10.0.0.1", "amount": 5.0, "nil": nil, "long": strings.Repeat("x", 64)}
	var rows []*Row
	for _, names := range [][]string{{"ip", "amount", "missing"}, {"amount", "nil", "long", "missing", "ip"}, {}, {"amount"}} {
		rows = append(rows, NewRow(names, fields), NewRow(names, map[string]any{"ip": "10.0.0.2"}))
	}
	rows = append(rows, rows[0], rows[3]) // back to names seen before
	for _, name := range []string{"ip", "amount", "nil", "long", "missing", "other"} {
		fr := NewFieldReader(name)
		for i, r := range rows {
			v, ok := fr.Get(r)
			wv, wok := r.Get(name)
			if v != wv || ok != wok {
				t.Errorf("row %d: FieldReader(%q).Get = %v, %v; Get = %v, %v", i, name, v, ok, wv, wok)
			}
		}
	}
}

// TestRowSize keeps a Row in the 128-byte size class (see Row).
func TestRowSize(t *testing.T) {
	if n := unsafe.Sizeof(Row{}); n != 128 {
		t.Errorf("a Row is %d bytes, want 128", n)
	}
}
