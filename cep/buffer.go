package cep

// buffer is the shared buffer of one key (SASE+'s and FlinkCEP's
// SharedBuffer): the events partial matches have taken, and one entry per
// event taken by a branch, pointing to the branch's previous entry. Partial
// matches that share a prefix share its entries: a branch is its last entry,
// and the chain of predecessors is the branch's match so far.
//
// Entries and events are reference counted and live in slices reused through
// free lists, so that steady-state processing does not allocate.
type buffer struct {
	entries     []entry
	freeEntries []int32
	events      []slot
	freeEvents  []int32
	live        int // events held
}

// entry is one event taken by a branch, under the step whose state took it.
type entry struct {
	ev   int32 // index in events
	step int32
	pred int32 // previous entry of the branch; -1 for its first event
	// refs counts the partial matches whose last entry this is and the
	// entries whose pred this is.
	refs int32
}

// slot holds an event while entries refer to it.
type slot struct {
	ev   *Event
	refs int32 // entries referring to it, plus one while it is being processed
}

// hold registers ev, locked once for the caller until it calls unhold.
func (b *buffer) hold(ev *Event) int32 {
	b.live++
	if n := len(b.freeEvents); n > 0 {
		i := b.freeEvents[n-1]
		b.freeEvents = b.freeEvents[:n-1]
		b.events[i] = slot{ev: ev, refs: 1}
		return i
	}
	b.events = append(b.events, slot{ev: ev, refs: 1})
	return int32(len(b.events) - 1)
}

// unhold releases one reference to event slot i and frees it when none is left.
func (b *buffer) unhold(i int32) {
	s := &b.events[i]
	s.refs--
	if s.refs == 0 {
		*s = slot{}
		b.freeEvents = append(b.freeEvents, i)
		b.live--
	}
}

// put adds an entry for event slot ev taken under step after pred (-1: none).
// The entry starts with no reference: the caller locks it for the partial
// match that took the event.
func (b *buffer) put(ev, step, pred int32) int32 {
	b.events[ev].refs++
	if pred >= 0 {
		b.entries[pred].refs++
	}
	e := entry{ev: ev, step: step, pred: pred}
	if n := len(b.freeEntries); n > 0 {
		i := b.freeEntries[n-1]
		b.freeEntries = b.freeEntries[:n-1]
		b.entries[i] = e
		return i
	}
	b.entries = append(b.entries, e)
	return int32(len(b.entries) - 1)
}

func (b *buffer) lock(e int32) {
	if e >= 0 {
		b.entries[e].refs++
	}
}

// release drops one reference to entry e; an entry left without references is
// freed, and so, in turn, are the predecessors and events only it held.
func (b *buffer) release(e int32) {
	for e >= 0 {
		en := &b.entries[e]
		en.refs--
		if en.refs > 0 {
			return
		}
		pred, ev := en.pred, en.ev
		*en = entry{}
		b.freeEntries = append(b.freeEntries, e)
		b.unhold(ev)
		e = pred
	}
}

// length is the number of entries of the branch ending at e.
func (b *buffer) length(e int32) int {
	n := 0
	for ; e >= 0; e = b.entries[e].pred {
		n++
	}
	return n
}

// materialize returns the events of the branch ending at e, by step: one
// slice per step of a pattern with steps steps, cut from one backing array.
func (b *buffer) materialize(e int32, steps int) [][]*Event {
	out := make([][]*Event, steps)
	n := b.length(e)
	if n == 0 {
		return out
	}
	flat := make([]*Event, n)
	// Walk back from the last entry; a branch's steps never decrease, so
	// each step's events are one run of the chain.
	cur, end := int32(-1), n
	for i := n; e >= 0; e = b.entries[e].pred {
		en := &b.entries[e]
		if en.step != cur {
			if cur >= 0 {
				out[cur] = flat[i:end:end]
			}
			cur, end = en.step, i
		}
		i--
		flat[i] = b.events[en.ev].ev
		if en.pred < 0 {
			out[cur] = flat[i:end:end]
		}
	}
	return out
}
