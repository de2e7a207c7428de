package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/rules"
)

func TestHistory(t *testing.T) {
	var h history
	for _, ev := range []struct {
		t int64
		v string
	}{{10, "a"}, {30, "c"}, {20, "b"}, {30, "d"}, {5, "z"}} {
		h.add(ev.t, ev.v, rules.Mark{})
	}
	var times []int64
	for _, p := range h.past {
		times = append(times, p.Time)
	}
	if diff := cmp.Diff([]int64{5, 10, 20, 30, 30}, times); diff != "" {
		t.Fatalf("times (-want +got):\n%s", diff)
	}
	tests := []struct {
		from, to int64
		want     []any
	}{
		{10, 30, []any{"a", "b", "c", "d"}}, // both ends inclusive; equal times in arrival order
		{11, 29, []any{"b"}},
		{31, 40, nil},
		{0, 4, nil},
	}
	for _, tt := range tests {
		var got []any
		for _, p := range h.between(tt.from, tt.to) {
			got = append(got, p.Value)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("between(%d, %d) (-want +got):\n%s", tt.from, tt.to, diff)
		}
	}
	if got := h.between(10, 30); cap(got) != len(got) {
		t.Errorf("between returned spare capacity %d > %d: callers could overwrite history", cap(got), len(got))
	}
	if over := h.evict(20, 10); over != 0 || h.len() != 3 {
		t.Fatalf("evict(20): overflow %d, %d left, want 0 and 3", over, h.len())
	}
	if over := h.evict(0, 1); over != 2 || h.len() != 1 || h.past[0].Value != "d" {
		t.Fatalf("evict cap 1: overflow %d, left %v, want 2 and [d]", over, h.past)
	}
}
