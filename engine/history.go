package engine

import (
	"slices"
	"sort"

	"github.com/vigil-cep/vigil/rules"
)

// history is one key's events of one stream, sorted by event time (arrival
// order among equal times), for history() in rules: each event's time, what
// history keeps of it (a Row of the fields rules read, or the whole field
// map) and its element-predicate results, side by side in one array, so that
// adding an event or reading a window touches one array, not three.
type history struct {
	past []rules.Past
}

// historyCap is the capacity a key's history starts with: most keys keep a
// few events, and room for them at once saves growing through 1 and 2.
const historyCap = 4

// add inserts an event, keeping time order. Events mostly arrive in order, so
// the search starts from the end.
func (h *history) add(t int64, v any, m rules.Mark) {
	if cap(h.past) == 0 {
		h.past = make([]rules.Past, 0, historyCap)
	}
	i := len(h.past)
	for i > 0 && h.past[i-1].Time > t {
		i--
	}
	h.past = slices.Insert(h.past, i, rules.Past{Time: t, Value: v, Mark: m})
}

// len is how many events it holds.
func (h *history) len() int { return len(h.past) }

// evict drops events older than horizon, and the oldest beyond maxLen; it
// returns how many it dropped for the cap (overflow, reported in stats).
func (h *history) evict(horizon int64, maxLen int) (overflow int) {
	n := sort.Search(len(h.past), func(i int) bool { return h.past[i].Time >= horizon })
	if extra := len(h.past) - n - maxLen; extra > 0 {
		n += extra
		overflow = extra
	}
	if n == 0 {
		return 0
	}
	// Move the survivors to the front rather than reslicing: the array keeps
	// its capacity, so the next appends do not reallocate.
	k := copy(h.past, h.past[n:])
	clear(h.past[k:]) // let the dropped events be collected
	h.past = h.past[:k]
	if cap(h.past) > 64 && k < cap(h.past)/4 {
		h.past = slices.Clone(h.past) // release a backing array sized for a burst
	}
	return overflow
}

// between returns the events with time in [from, to]. The result aliases the
// store with its capacity clipped, so a caller cannot append into it.
func (h *history) between(from, to int64) []rules.Past {
	lo := sort.Search(len(h.past), func(i int) bool { return h.past[i].Time >= from })
	hi := sort.Search(len(h.past), func(i int) bool { return h.past[i].Time > to })
	if lo >= hi {
		return nil
	}
	return h.past[lo:hi:hi]
}
