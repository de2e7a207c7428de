package engine

import (
	"slices"
	"sort"

	"github.com/vigil-cep/vigil/rules"
)

// history is one key's events of one stream, sorted by event time (arrival
// order among equal times), for history() in rules. times, values and marks
// are parallel: values holds the events (Rows of the fields rules read, or
// whole field maps), marks their element-predicate results.
type history struct {
	times  []int64
	values []any
	marks  []rules.Mark
}

// historyCap is the capacity a key's history starts with.
const historyCap = 4

// add inserts an event, keeping time order. Events mostly arrive in order, so
// the search starts from the end.
func (h *history) add(t int64, v any, m rules.Mark) {
	if cap(h.times) == 0 {
		// Most keys keep a few events: room for them at once saves the
		// three slices growing through capacities 1 and 2 (six allocations
		// and copies on the hot path).
		h.times, h.values, h.marks = make([]int64, 0, historyCap), make([]any, 0, historyCap), make([]rules.Mark, 0, historyCap)
	}
	i := len(h.times)
	for i > 0 && h.times[i-1] > t {
		i--
	}
	h.times = append(h.times, 0)
	h.values = append(h.values, nil)
	h.marks = append(h.marks, rules.Mark{})
	copy(h.times[i+1:], h.times[i:])
	copy(h.values[i+1:], h.values[i:])
	copy(h.marks[i+1:], h.marks[i:])
	h.times[i], h.values[i], h.marks[i] = t, v, m
}

// evict drops events older than horizon, and the oldest beyond maxLen; it
// returns how many it dropped for the cap (overflow, reported in stats).
func (h *history) evict(horizon int64, maxLen int) (overflow int) {
	n := sort.Search(len(h.times), func(i int) bool { return h.times[i] >= horizon })
	if extra := len(h.times) - n - maxLen; extra > 0 {
		n += extra
		overflow = extra
	}
	if n == 0 {
		return 0
	}
	// Move the survivors to the front rather than reslicing: the arrays keep
	// their capacity, so the next appends do not reallocate.
	k := copy(h.times, h.times[n:])
	copy(h.values, h.values[n:])
	copy(h.marks, h.marks[n:])
	clear(h.values[k:]) // let the dropped events be collected
	clear(h.marks[k:])
	h.times, h.values, h.marks = h.times[:k], h.values[:k], h.marks[:k]
	if cap(h.times) > 64 && k < cap(h.times)/4 {
		h.times = slices.Clone(h.times) // release a backing array sized for a burst
		h.values = slices.Clone(h.values)
		h.marks = slices.Clone(h.marks)
	}
	return overflow
}

// between returns the events with time in [from, to] and their marks. The
// results alias the store with their capacity clipped, so a caller cannot
// append into them.
func (h *history) between(from, to int64) ([]any, []rules.Mark) {
	lo := sort.Search(len(h.times), func(i int) bool { return h.times[i] >= from })
	hi := sort.Search(len(h.times), func(i int) bool { return h.times[i] > to })
	if lo >= hi {
		return nil, nil
	}
	return h.values[lo:hi:hi], h.marks[lo:hi:hi]
}
