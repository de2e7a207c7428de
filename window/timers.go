package window

import (
	"encoding/binary"
	"strings"
)

// timerHeap is a min-heap of live windows ordered by (at, key, start, end):
// every live window has exactly one entry, due at its next timer (its firing
// time end-1 while armed, its cleanup time afterwards). Each window records
// its position in idx so that a session merge can move or remove it.
//
// An entry carries the window's due time and the first 16 bytes of its key,
// so that ordering two entries seldom reads the windows: at a million windows
// each read is a cache miss, and a sift compares two entries per level. At a
// tumbling window's end every key's window is due at once and the key
// decides; reading it through the window, then its text, made the heap half
// of what firing them cost.
type timerHeap []timerEntry

type timerEntry struct {
	at     int64  // the window's at, as of its last push or fix
	k0, k1 uint64 // the key's first 16 bytes, big-endian, zero-padded
	w      *window
}

func newTimerEntry(w *window) timerEntry {
	var b [16]byte
	copy(b[:], w.key)
	return timerEntry{at: w.at, k0: binary.BigEndian.Uint64(b[:8]), k1: binary.BigEndian.Uint64(b[8:]), w: w}
}

// less orders entries as windowLess orders their windows. Zero padding sorts
// before every byte, so a difference in the first 16 bytes orders two keys as
// strings.Compare does; only keys equal there (or equal but for trailing zero
// bytes) read the windows.
func (a timerEntry) less(b timerEntry) bool {
	switch {
	case a.at != b.at:
		return a.at < b.at
	case a.k0 != b.k0:
		return a.k0 < b.k0
	case a.k1 != b.k1:
		return a.k1 < b.k1
	}
	return windowLess(a.w, b.w)
}

// windowLess is the heap's order on windows: (at, key, start, end), a strict
// total order over the live windows of an operator.
func windowLess(a, b *window) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c < 0
	}
	if a.start != b.start {
		return a.start < b.start
	}
	return a.end < b.end
}

func (h *timerHeap) push(w *window) {
	w.idx = len(*h)
	*h = append(*h, newTimerEntry(w))
	h.up(w.idx)
}

// remove takes the window at position i out of the heap.
func (h *timerHeap) remove(i int) {
	s := *h
	last := len(s) - 1
	if i != last {
		s[i] = s[last]
		s[i].w.idx = i
	}
	s[last] = timerEntry{}
	*h = s[:last]
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap order after the at of the window at position i
// changed.
func (h *timerHeap) fix(i int) {
	s := *h
	s[i].at = s[i].w.at
	if !s.down(i) {
		s.up(i)
	}
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts the entry at i towards the leaves and reports whether it moved.
func (h timerHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].less(h[c]) {
			c = r
		}
		if !h[c].less(h[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].w.idx = i
	h[j].w.idx = j
}
