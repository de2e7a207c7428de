package join

import (
	"math"
	"testing"
)

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string // "" for valid
	}{
		{"flink documentation example", Spec{Lower: -2, Upper: 1}, ""},
		{"point", Spec{}, ""},
		{"negative", Spec{Lower: -5000, Upper: -2000}, ""},
		{"positive exclusive", Spec{Lower: 0, Upper: 1, LowerExclusive: true}, ""},
		{"one ms left after both", Spec{Lower: 0, Upper: 2, LowerExclusive: true, UpperExclusive: true}, ""},
		{"whole int64 range", Spec{Lower: math.MinInt64, Upper: math.MaxInt64, LowerExclusive: true, UpperExclusive: true}, ""},

		{"lower above upper", Spec{Lower: 300_000, Upper: 60_000},
			"join bounds: lower 5m0s is above upper 1m0s"},
		{"lower above upper negative", Spec{Lower: -1, Upper: -1500},
			"join bounds: lower -1ms is above upper -1.5s"},
		{"lower above upper beyond durations", Spec{Lower: math.MaxInt64, Upper: 0},
			"join bounds: lower 9223372036854775807ms is above upper 0s"},
		{"point with exclusive lower", Spec{LowerExclusive: true},
			"join bounds: (0s, 0s] is empty (times are whole milliseconds)"},
		{"point with exclusive upper", Spec{UpperExclusive: true},
			"join bounds: [0s, 0s) is empty (times are whole milliseconds)"},
		{"point with both exclusive", Spec{Lower: 60_000, Upper: 60_000, LowerExclusive: true, UpperExclusive: true},
			"join bounds: (1m0s, 1m0s) is empty (times are whole milliseconds)"},
		{"one ms apart with both exclusive", Spec{Lower: 5, Upper: 6, LowerExclusive: true, UpperExclusive: true},
			"join bounds: (5ms, 6ms) is empty (times are whole milliseconds)"},
		{"exclusive upper at min", Spec{Lower: math.MinInt64, Upper: math.MinInt64, UpperExclusive: true},
			"join bounds: [-9223372036854775808ms, -9223372036854775808ms) is empty (times are whole milliseconds)"},
		{"exclusive lower at max", Spec{Lower: math.MaxInt64, Upper: math.MaxInt64, LowerExclusive: true},
			"join bounds: (9223372036854775807ms, 9223372036854775807ms] is empty (times are whole milliseconds)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.spec.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
			op, err := New(tt.spec, nil)
			if (err == nil) != (tt.want == "") || (err != nil && err.Error() != tt.want) {
				t.Errorf("New() error = %v, want %q", err, tt.want)
			}
			if err == nil && op.Len() != 0 {
				t.Errorf("new Operator has Len() = %d", op.Len())
			}
		})
	}
}

func TestSideString(t *testing.T) {
	for side, want := range map[Side]string{Left: "left", Right: "right", 7: "Side(7)"} {
		if got := side.String(); got != want {
			t.Errorf("Side(%d).String() = %q, want %q", uint8(side), got, want)
		}
	}
}
