package window

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// An entry's order, read from its inline key prefix where it can, is the
// windows' order: timerEntry.less and windowLess agree on every pair, around
// the prefix's 16 bytes and the zero bytes its padding is made of.
func TestTimerEntryOrder(t *testing.T) {
	long := strings.Repeat("k", 16)
	keys := []string{
		"", "\x00", "\x00\x00", "a", "a\x00", "a\x00b", "ab", "b", "\xff", "\xff\x00",
		long, long + "\x00", long + "a", long + "b", long[:15], long[:15] + "\x00",
		long[:15] + "\x00a", "user-00000001", "user-00000002", "user-000000010",
	}
	type win struct {
		key            string
		at, start, end int64
	}
	var wins []*window
	for _, k := range keys {
		for _, w := range []win{{k, 10, 0, 11}, {k, 10, 1, 11}, {k, 10, 1, 12}, {k, 9, 0, 10}} {
			wins = append(wins, &window{key: w.key, at: w.at, start: w.start, end: w.end})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 'b', 0x7f, 0x80, 0xff}
	for range 400 {
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		wins = append(wins, &window{key: string(b), at: int64(rng.IntN(2)), start: int64(rng.IntN(2)), end: 2})
	}
	for _, a := range wins {
		for _, b := range wins {
			if got, want := newTimerEntry(a).less(newTimerEntry(b)), windowLess(a, b); got != want {
				t.Fatalf("(%q %d %d %d) before (%q %d %d %d): entry order %v, window order %v",
					a.key, a.at, a.start, a.end, b.key, b.at, b.start, b.end, got, want)
			}
		}
	}
}

// The heap gives its windows up in windowLess order whatever the order they
// were pushed in, and keeps every window's idx, through fixes and removals.
func TestTimerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h timerHeap
	live := map[*window]bool{}
	check := func() {
		t.Helper()
		for i, e := range h {
			if e.w.idx != i || e.at != e.w.at {
				t.Fatalf("entry %d: window idx %d, at %d (window's %d)", i, e.w.idx, e.at, e.w.at)
			}
			if i > 0 && h[i].less(h[(i-1)/2]) {
				t.Fatalf("entry %d comes before its parent", i)
			}
		}
	}
	for range 2000 {
		switch op := rng.IntN(4); {
		case op < 2 || len(h) == 0:
			w := &window{key: "user-" + string(rune('a'+rng.IntN(3))) + strings.Repeat("x", rng.IntN(20)),
				at: int64(rng.IntN(50)), start: int64(rng.IntN(5)), end: 10}
			h.push(w)
			live[w] = true
		case op == 2:
			w := h[rng.IntN(len(h))].w
			w.at = int64(rng.IntN(50))
			h.fix(w.idx)
		default:
			w := h[rng.IntN(len(h))].w
			h.remove(w.idx)
			delete(live, w)
		}
		check()
	}
	var prev *window
	for len(h) > 0 {
		w := h[0].w
		if prev != nil && windowLess(w, prev) {
			t.Fatalf("(%q %d) left the heap after (%q %d)", w.key, w.at, prev.key, prev.at)
		}
		h.remove(0)
		delete(live, w)
		check()
		prev = w
	}
	if len(live) != 0 {
		t.Fatalf("%d windows never left the heap", len(live))
	}
}
