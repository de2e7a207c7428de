package asyncio

import "time"

// entry is one submitted element. Its fields are written by the worker that
// completes it before the entry is marked done under Operator.mu; they are
// read only by the emitter after that.
type entry struct {
	key      string
	element  any
	deadline time.Time
	value    map[string]any
	err      error
	seg      *segment // unordered mode only
	done     bool
}

func (e *entry) output() Output {
	return Output{Element: e.element, Key: e.key, Value: e.value, Err: e.err}
}

// queue holds everything submitted and not yet handed to the emitter and
// decides what may be emitted next. Its methods are called with Operator.mu
// held.
type queue interface {
	addElement(e *entry)
	// addWatermark reports whether it added an output (false: merged into
	// the previous watermark).
	addWatermark(wm int64) bool
	// complete marks e done (e.done is already set).
	complete(e *entry)
	// pop returns the next output that may be emitted.
	pop() (Output, bool)
}

// orderedQueue emits strictly in input order: an element waits for every
// element and watermark before it. Watermarks are entries that are always
// done.
type orderedQueue struct {
	items []orderedItem
}

type orderedItem struct {
	e  *entry // nil for a watermark
	wm int64
}

func (q *orderedQueue) addElement(e *entry) { q.items = append(q.items, orderedItem{e: e}) }

func (q *orderedQueue) addWatermark(wm int64) bool {
	// A watermark directly behind another one that is not emitted yet
	// supersedes it (watermarks only advance), which keeps the queue bounded
	// by 2*Capacity+1 entries whatever the watermark rate.
	if n := len(q.items); n > 0 && q.items[n-1].e == nil {
		q.items[n-1].wm = max(q.items[n-1].wm, wm)
		return false
	}
	q.items = append(q.items, orderedItem{wm: wm})
	return true
}

func (q *orderedQueue) complete(*entry) {}

func (q *orderedQueue) pop() (Output, bool) {
	if len(q.items) == 0 {
		return Output{}, false
	}
	head := q.items[0]
	if head.e != nil && !head.e.done {
		return Output{}, false
	}
	q.items[0] = orderedItem{}
	q.items = q.items[1:]
	if head.e == nil {
		return Output{Watermark: true, WM: head.wm}, true
	}
	return head.e.output(), true
}

// unorderedQueue emits elements as they complete, but only those of the
// first segment: the elements between two watermarks. A segment's closing
// watermark is emitted once all its elements are; then the next segment's
// completed elements may go. So no element crosses a watermark either way.
type unorderedQueue struct {
	segs []*segment
}

// segment is the run of elements submitted after the previous watermark.
type segment struct {
	pending int      // elements not completed yet
	ready   []*entry // completed, not emitted yet
	closed  bool     // a watermark follows the segment
	wm      int64
}

func (q *unorderedQueue) tail() *segment {
	if n := len(q.segs); n > 0 {
		return q.segs[n-1]
	}
	return nil
}

func (q *unorderedQueue) addElement(e *entry) {
	s := q.tail()
	if s == nil || s.closed {
		s = &segment{}
		q.segs = append(q.segs, s)
	}
	s.pending++
	e.seg = s
}

func (q *unorderedQueue) addWatermark(wm int64) bool {
	s := q.tail()
	switch {
	case s == nil:
		q.segs = append(q.segs, &segment{closed: true, wm: wm})
	case s.closed:
		// No element since the last watermark, which is not emitted yet: the
		// new one supersedes it (see orderedQueue.addWatermark).
		s.wm = max(s.wm, wm)
		return false
	default:
		s.closed, s.wm = true, wm
	}
	return true
}

func (q *unorderedQueue) complete(e *entry) {
	e.seg.pending--
	e.seg.ready = append(e.seg.ready, e)
}

func (q *unorderedQueue) pop() (Output, bool) {
	if len(q.segs) == 0 {
		return Output{}, false
	}
	s := q.segs[0]
	if len(s.ready) > 0 {
		e := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		return e.output(), true
	}
	if s.pending > 0 || !s.closed {
		return Output{}, false
	}
	q.segs[0] = nil
	q.segs = q.segs[1:]
	return Output{Watermark: true, WM: s.wm}, true
}
