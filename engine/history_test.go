package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

var histNames = []string{"v"}

// addV adds an event whose row holds v.
func addV(t testing.TB, h *history, ts int64, v string, m rules.Mark, errs []string) {
	t.Helper()
	val, err := historyValue(map[string]any{"v": v}, histNames)
	if err != nil {
		t.Fatal(err)
	}
	h.add(ts, val, m, errs)
}

// valuesOf returns the v of the events [lo, hi).
func valuesOf(h *history, lo, hi int) []any {
	var got []any
	for _, r := range h.values(lo, hi, histNames) {
		v, _ := r.(*stream.Row).Get("v")
		got = append(got, v)
	}
	return got
}

func TestHistory(t *testing.T) {
	var h history
	for _, ev := range []struct {
		t int64
		v string
	}{{10, "a"}, {30, "c"}, {20, "b"}, {30, "d"}, {5, "z"}} {
		addV(t, &h, ev.t, ev.v, rules.Mark{Set: uint64(ev.t)}, nil)
	}
	var times []int64
	for _, p := range h.past() {
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
		lo, hi := h.span(tt.from, tt.to)
		if diff := cmp.Diff(tt.want, valuesOf(&h, lo, hi)); diff != "" {
			t.Errorf("values between %d and %d (-want +got):\n%s", tt.from, tt.to, diff)
		}
		var marks []uint64
		for _, p := range h.between(tt.from, tt.to) {
			marks = append(marks, p.Mark.Set)
		}
		var want []uint64
		for _, p := range h.past()[lo:hi] {
			want = append(want, uint64(p.Time))
		}
		if !slices.Equal(marks, want) {
			t.Errorf("marks between %d and %d: %v, want %v", tt.from, tt.to, marks, want)
		}
	}
	if got := h.between(10, 30); cap(got) != len(got) {
		t.Errorf("between returned spare capacity %d > %d: callers could overwrite history", cap(got), len(got))
	}
	if over := h.evict(20, 10); over != 0 || h.len() != 3 {
		t.Fatalf("evict(20): overflow %d, %d left, want 0 and 3", over, h.len())
	}
	if over := h.evict(0, 1); over != 2 || h.len() != 1 || !slices.Equal(valuesOf(&h, 0, 1), []any{"d"}) {
		t.Fatalf("evict cap 1: overflow %d, left %v, want 2 and [d]", over, valuesOf(&h, 0, h.len()))
	}
}

// TestHistoryEncoding adds, inserts out of order and evicts at random, and
// checks after each step that the encoded entries are what a history built
// in order from the same events holds, and that a restore of them (in order,
// and in any order) gives the same history, the inline field's value in the
// marks included.
func TestHistoryEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type event struct {
		t    int64
		v    string
		m    rules.Mark
		errs []string
	}
	var h history
	var model []event // in time order, arrival order among equal times
	for step := range 3000 {
		if rng.IntN(8) == 0 && len(model) > 0 {
			horizon := model[0].t + rng.Int64N(20)
			h.evict(horizon, 50)
			i := 0
			for i < len(model) && model[i].t < horizon {
				i++
			}
			model = model[max(i, len(model)-50):]
		} else {
			ev := event{t: int64(step/4) + rng.Int64N(30), v: string(rune('a' + rng.IntN(26))), m: rules.Mark{Set: rng.Uint64N(8)}}
			ev.m.Inline = rules.ShortOf(ev.v) // as the inline field's value (the row's field 0)
			if rng.IntN(10) == 0 {
				ev.m.Failed = 2
				ev.errs = []string{"", "boom " + ev.v}
			}
			addV(t, &h, ev.t, ev.v, ev.m, ev.errs)
			i := len(model)
			for i > 0 && model[i-1].t > ev.t {
				i--
			}
			model = slices.Insert(model, i, ev)
		}
		var want history
		for _, ev := range model {
			addV(t, &want, ev.t, ev.v, ev.m, ev.errs)
		}
		if !bytes.Equal(h.enc(), want.enc()) || len(h.past()) != len(want.past()) {
			t.Fatalf("step %d: entries differ from a history built in order", step)
		}
		for i, ev := range model {
			if ev.errs != nil && h.failure(i, 1) != ev.errs[1] {
				t.Fatalf("step %d: failure(%d, 1) = %q, want %q", step, i, h.failure(i, 1), ev.errs[1])
			}
		}
		var restored, twice history
		d := codec.NewDecoder(h.enc())
		scratch := restored.restore(d, h.len(), histNames, 0, nil)
		if err := d.Finish(); err != nil {
			t.Fatalf("step %d: restore: %v", step, err)
		}
		if !bytes.Equal(restored.enc(), h.enc()) || !slices.Equal(restored.past(), h.past()) {
			t.Fatalf("step %d: restored history differs", step)
		}
		// In two parts: the second is added to the events of the first.
		k := rng.IntN(h.len() + 1)
		d = codec.NewDecoder(h.enc())
		scratch = twice.restore(d, k, histNames, 0, scratch)
		twice.restore(d, h.len()-k, histNames, 0, scratch)
		if err := d.Finish(); err != nil {
			t.Fatalf("step %d: restore in two parts: %v", step, err)
		}
		if !bytes.Equal(twice.enc(), h.enc()) || !slices.Equal(twice.past(), h.past()) {
			t.Fatalf("step %d: history restored in two parts (%d, then %d) differs", step, k, h.len()-k)
		}
	}
	// Entries out of time order (not written so, but readable): placed.
	var shuffled codec.Encoder
	var all []event
	for range 20 {
		ev := event{t: rng.Int64N(10), v: string(rune('a' + rng.IntN(26)))}
		all = append(all, ev)
		val, _ := historyValue(map[string]any{"v": ev.v}, histNames)
		shuffled.Raw(appendEntry(nil, ev.t, val, ev.m, nil))
	}
	var got, want history
	d := codec.NewDecoder(shuffled.Bytes())
	got.restore(d, len(all), histNames, -1, nil)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range all {
		addV(t, &want, ev.t, ev.v, ev.m, nil)
	}
	if !bytes.Equal(got.enc(), want.enc()) || !slices.Equal(got.past(), want.past()) {
		t.Fatal("entries out of order: restored history differs from one built by add")
	}
}

// TestEntryLen: entryLen is the length appendEntry writes, which add relies
// on to append within the block (a shorter one would move it unseen).
func TestEntryLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		ts := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			ts = -ts
		}
		value := make([]byte, rng.IntN(300))
		m := rules.Mark{Set: rng.Uint64() >> rng.IntN(64), Failed: rng.Uint64() >> rng.IntN(64)}
		var errs []string
		if rng.IntN(3) == 0 {
			errs = []string{}
			for range rng.IntN(4) {
				errs = append(errs, string(make([]byte, rng.IntN(200))))
			}
		}
		if got, want := entryLen(ts, value, m, errs), len(appendEntry(nil, ts, value, m, errs)); got != want {
			t.Fatalf("entryLen(%d, %d bytes, %+v, %d errors) = %d, want %d", ts, len(value), m, len(errs), got, want)
		}
	}
}

// TestHistoryBurst: a history that grew for a burst gives its block back
// when eviction leaves it a quarter full or less, whole when it leaves none,
// and takes events again after.
func TestHistoryBurst(t *testing.T) {
	var h history
	for round := range 3 {
		for i := range 200 {
			addV(t, &h, int64(1000*round+i), fmt.Sprint(i), rules.Mark{}, nil)
		}
		h.evict(int64(1000*round+190), 1000)
		if h.len() != 10 || cap(h.past()) != 10 {
			t.Fatalf("round %d: after evicting all but 10 of 200: %d held, room for %d; want 10 and 10", round, h.len(), cap(h.past()))
		}
		if got := valuesOf(&h, 0, 2); !slices.Equal(got, []any{"190", "191"}) {
			t.Fatalf("round %d: values %v after the shrink, want [190 191]", round, got)
		}
		for i := range 100 {
			addV(t, &h, int64(1000*round+200+i), fmt.Sprint(i), rules.Mark{}, nil)
		}
		h.evict(int64(1000*round+999), 1000)
		if h.len() != 0 || h.b != nil {
			t.Fatalf("round %d: after evicting every event: %d held, block %d bytes; want none", round, h.len(), len(h.b))
		}
	}
}
