package engine

import (
	"time"

	"github.com/vigil-cep/vigil/stream"
)

// Firing in slices (docs/design.md "Firing in slices"). An advance across
// an hour's end fires the hourly window of every key that paid in the hour:
// at a million keys, seconds of a task's time in one go, during which it
// answers no request. A task told to (SliceFiring) fires at most
// fireInline windows in the advance; the windows' watermark moves all the
// same (window.Operator.Raise), and the rest are overdue. The driver works
// them off between requests and batches (Drain), and every key catches up
// before anything reads or changes its windows, so each key sees the same
// firings in the same order as at once; only the order across keys changes.

// fireInline is how many windows an advance fires at once before it leaves
// the rest to Drain: a few hundred microseconds, so that the common advance
// (a window or two) fires as it would without slices. A sweep (Task.sweep)
// forgets as many keys at once.
const fireInline = 256

// SliceFiring makes the task's advances fire at most fireInline windows at
// once, and leave the rest overdue for Drain. A service task does; replay
// fires everything in the advance (the order of its outputs is part of what
// it promises), and so does an advance to the end of the input (Finish).
func (t *Task) SliceFiring() { t.sliced, t.fireInline = true, fireInline }

// Overdue reports whether windows due at the watermark have yet to fire:
// the driver calls Drain until it reports false.
func (t *Task) Overdue() bool { return t.overdue }

// Drain fires overdue windows for about budget (0 or less: all of them),
// in the order the advance would have, and reports whether none is left.
func (t *Task) Drain(budget time.Duration) bool {
	var more func() bool
	if budget > 0 {
		// A window takes microseconds to fire: the clock is read every
		// few of them.
		start, n := time.Now(), 0
		more = func() bool { n++; return n%8 != 0 || time.Since(start) < budget }
	}
	return t.drain(more)
}

// drain is Drain until more (asked before each key or window; nil: go on)
// reports false: the frozen keys postponed first, then the keys owed to the
// sweep, then the windows.
func (t *Task) drain(more func() bool) bool {
	if !t.overdue {
		return true
	}
	for len(t.thawLater) > 0 {
		if more != nil && !more() {
			return false
		}
		key := t.thawLater[len(t.thawLater)-1]
		t.thawLater = t.thawLater[:len(t.thawLater)-1]
		if i := t.cold.find(key, keyHash(key)); i >= 0 && t.cold.ents[i].late {
			t.thaw(i) // unless used since, or frozen again after that
		}
	}
	t.thawLater = nil // its room back
	if !t.idle.forget(t.forgetExpired, more) {
		return false
	}
	for i, op := range t.windows {
		if !op.Drain(t.fire[i], more) {
			return false
		}
	}
	t.overdue = false
	return true
}

// fireWindows moves every window operator to wm (advance): all of their
// firing at once, or with SliceFiring the first fireInline windows and the
// rest overdue.
func (t *Task) fireWindows(wm int64) {
	if !t.sliced || wm == stream.MaxTime {
		for i, op := range t.windows {
			op.Advance(wm, t.fire[i])
		}
		t.overdue = false
		return
	}
	more := t.inlineMore()
	t.overdue = len(t.thawLater) > 0 || t.idle.owing() // keys left frozen by thawDue, or to sweep
	for i, op := range t.windows {
		op.Raise(wm)
		if !op.Drain(t.fire[i], more) {
			t.overdue = true
		}
	}
}

// inlineMore is the budget of an advance's own work in slices (fireWindows,
// sweep): fireInline windows or keys, or none while a backlog is overdue,
// which is Drain's: the advance of every request in a backlog would
// otherwise work off fireInline of it in the request's time.
func (t *Task) inlineMore() func() bool {
	left := t.fireInline
	if t.overdue {
		left = 0
	}
	return func() bool { left--; return left >= 0 }
}

// catchUp fires key's overdue windows, for a reader of its state.
func (t *Task) catchUp(key string) {
	if t.overdue {
		for i, op := range t.windows {
			op.CatchUp(key, t.fire[i])
		}
	}
}
