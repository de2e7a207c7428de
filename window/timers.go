package window

import "strings"

// timerHeap is a min-heap of live windows ordered by (at, key, start, end):
// every live window has exactly one entry, due at its next timer (its firing
// time end-1 while armed, its cleanup time afterwards). Each window records
// its position in idx so that a session merge can move or remove it.
type timerHeap []*window

func timerLess(a, b *window) bool {
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
	*h = append(*h, w)
	h.up(w.idx)
}

// remove takes the window at position i out of the heap.
func (h *timerHeap) remove(i int) {
	s := *h
	last := len(s) - 1
	if i != last {
		s[i] = s[last]
		s[i].idx = i
	}
	s[last] = nil
	*h = s[:last]
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap order after the entry at position i changed.
func (h *timerHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !timerLess(h[i], h[p]) {
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
		if r := c + 1; r < n && timerLess(h[r], h[c]) {
			c = r
		}
		if !timerLess(h[c], h[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
