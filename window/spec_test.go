package window

import (
	"math"
	"testing"
)

func TestSpecValidate(t *testing.T) {
	const h = 3600 * 1000
	tests := []struct {
		name string
		spec Spec
		want string // "" for valid
	}{
		{"tumbling", Spec{Kind: Tumbling, Size: 5}, ""},
		{"tumbling beijing day", Spec{Kind: Tumbling, Size: 24 * h, Offset: -8 * h}, ""},
		{"tumbling lateness", Spec{Kind: Tumbling, Size: 5, AllowedLateness: 3}, ""},
		{"sliding", Spec{Kind: Sliding, Size: 10, Slide: 3, Offset: -2}, ""},
		{"sliding slide equals size", Spec{Kind: Sliding, Size: 10, Slide: 10}, ""},
		{"sliding at the window limit", Spec{Kind: Sliding, Size: 10000, Slide: 1}, ""},
		{"session", Spec{Kind: Session, Gap: 30000, AllowedLateness: 1000}, ""},

		{"kind not set", Spec{Size: 5}, "window: kind is not set"},
		{"unknown kind", Spec{Kind: 7, Size: 5}, "window: unknown kind 7"},

		{"tumbling size zero", Spec{Kind: Tumbling},
			"tumbling window: size 0s must be positive"},
		{"tumbling size negative", Spec{Kind: Tumbling, Size: -5000},
			"tumbling window: size -5s must be positive"},
		{"tumbling offset equals size", Spec{Kind: Tumbling, Size: 5, Offset: 5},
			"tumbling window: offset 5ms must be smaller than size 5ms in absolute value"},
		{"tumbling offset minus size", Spec{Kind: Tumbling, Size: 24 * h, Offset: -24 * h},
			"tumbling window: offset -24h0m0s must be smaller than size 24h0m0s in absolute value"},
		{"tumbling offset min int", Spec{Kind: Tumbling, Size: 5, Offset: math.MinInt64},
			"tumbling window: offset -9223372036854775808ms must be smaller than size 5ms in absolute value"},
		{"tumbling with slide and gap", Spec{Kind: Tumbling, Size: 5, Slide: 1, Gap: 60000},
			"tumbling window: slide 1ms does not apply (only size and offset)\n" +
				"tumbling window: gap 1m0s does not apply (only size and offset)"},
		{"tumbling negative lateness", Spec{Kind: Tumbling, Size: 5, AllowedLateness: -1},
			"tumbling window: allowed lateness -1ms must not be negative"},

		{"sliding slide zero", Spec{Kind: Sliding, Size: 10},
			"sliding window: slide 0s must be positive"},
		{"sliding size and slide zero", Spec{Kind: Sliding},
			"sliding window: size 0s must be positive\nsliding window: slide 0s must be positive"},
		{"sliding slide above size", Spec{Kind: Sliding, Size: 5000, Slide: 10000},
			"sliding window: slide 10s must not exceed size 5s"},
		{"sliding too many windows", Spec{Kind: Sliding, Size: 24 * h, Slide: 1000},
			"sliding window: size 24h0m0s and slide 1s put each element in up to 86400 windows, more than 10000"},
		{"sliding too many windows rounded up", Spec{Kind: Sliding, Size: 20001, Slide: 2},
			"sliding window: size 20.001s and slide 2ms put each element in up to 10001 windows, more than 10000"},
		{"sliding offset equals slide", Spec{Kind: Sliding, Size: 10, Slide: 5, Offset: -5},
			"sliding window: offset -5ms must be smaller than slide 5ms in absolute value"},
		{"sliding with gap", Spec{Kind: Sliding, Size: 10, Slide: 5, Gap: 1},
			"sliding window: gap 1ms does not apply (only size, slide and offset)"},

		{"session gap zero", Spec{Kind: Session},
			"session window: gap 0s must be positive"},
		{"session with size slide offset", Spec{Kind: Session, Gap: 5, Size: 1, Slide: 2, Offset: 3},
			"session window: size 1ms does not apply (only gap)\n" +
				"session window: slide 2ms does not apply (only gap)\n" +
				"session window: offset 3ms does not apply (only gap)"},
		{"session every error", Spec{Kind: Session, Gap: -1, AllowedLateness: math.MinInt64},
			"session window: gap -1ms must be positive\n" +
				"session window: allowed lateness -9223372036854775808ms must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 5}
	tests := []struct {
		name string
		spec Spec
		aggs []Aggregate
		want string
	}{
		{"invalid spec", Spec{Kind: Session}, nil, "session window: gap 0s must be positive"},
		{"empty name", spec, []Aggregate{{Name: "n", Kind: Count}, {Kind: Sum}},
			"window: aggregate 1 (sum): empty name"},
		{"unknown kind", spec, []Aggregate{{Name: "x"}}, `window: aggregate "x": unknown kind 0`},
		{"duplicate name", spec, []Aggregate{{Name: "x", Kind: Count}, {Name: "x", Kind: Sum}},
			`window: aggregate "x": duplicate name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.spec, tt.aggs)
			if err == nil || err.Error() != tt.want {
				t.Errorf("New() error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseAggKind(t *testing.T) {
	for _, k := range []AggKind{Count, Sum, Min, Max, Avg, CountDistinct} {
		got, ok := ParseAggKind(k.String())
		if !ok || got != k {
			t.Errorf("ParseAggKind(%q) = %v, %v; want %v, true", k.String(), got, ok, k)
		}
	}
	for _, name := range []string{"", "COUNT", "distinct", "AggKind(0)"} {
		if k, ok := ParseAggKind(name); ok {
			t.Errorf("ParseAggKind(%q) = %v, true; want false", name, k)
		}
	}
}

func TestDistinctKey(t *testing.T) {
	same := [][]any{
		{int64(1), float64(1), int(1), uint8(1), float32(1), uint64(1)},
		{int64(0), float64(0), math.Copysign(0, -1)},
		{float64(1.5), float32(1.5)},
		{float64(1 << 63), uint64(1 << 63)},
		{math.NaN(), -math.NaN()},
		{"1"},
		{true},
	}
	for i, group := range same {
		want, ok := distinctKey(group[0])
		if !ok {
			t.Fatalf("distinctKey(%#v) not counted", group[0])
		}
		for _, v := range group[1:] {
			if got, _ := distinctKey(v); got != want {
				t.Errorf("distinctKey(%T %v) = %#v, want %#v like %T %v", v, v, got, want, group[0], group[0])
			}
		}
		for _, other := range same[i+1:] {
			if got, _ := distinctKey(other[0]); got == want {
				t.Errorf("distinctKey(%#v) = distinctKey(%#v) = %#v", other[0], group[0], got)
			}
		}
	}
	for _, v := range []any{nil, []int{1}, map[string]int{}, struct{}{}} {
		if _, ok := distinctKey(v); ok {
			t.Errorf("distinctKey(%#v) counted, want skipped", v)
		}
	}
}
