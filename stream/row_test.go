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
