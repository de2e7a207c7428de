package join

import (
	"container/heap"
	"fmt"
	"math"
	"strings"
)

// Side says which input of the join an element belongs to.
type Side uint8

// The two inputs of a join. A pair is (Left, Right), and the bounds are
// measured from the left element: right.Time - left.Time in [Lower, Upper].
const (
	Left Side = iota
	Right
)

// String returns "left" or "right".
func (s Side) String() string {
	switch s {
	case Left:
		return "left"
	case Right:
		return "right"
	}
	return fmt.Sprintf("Side(%d)", uint8(s))
}

// Element is one buffered event. Time is its event time in milliseconds;
// Seq is its arrival order within the task (unique, increasing) and breaks
// ties between equal times; Value is opaque to the operator. Once given to
// Add, an Element belongs to the Operator until Advance drops it: the caller
// must not change it.
type Element struct {
	Time  int64
	Seq   uint64
	Value any
}

// Pair is one join result: a left and a right element of the same key whose
// times are in range and that meet the condition. Time is the larger of the
// two times (Flink's rule). The elements are the Operator's buffered ones
// and must not be changed.
type Pair struct {
	Left, Right *Element
	Time        int64
}

// Condition is the join's extra predicate over a left and a right element
// (nil means true). It runs on the task's goroutine, inside Add, and must
// not call back into the Operator.
type Condition func(left, right *Element) bool

// Operator buffers both sides of one join for every key of a task. Not safe
// for concurrent use: one goroutine (the task) owns it. See the package
// documentation for what it keeps and when it emits.
type Operator struct {
	lo, hi int64 // effective inclusive bounds of right.Time - left.Time
	cond   Condition
	wm     int64 // largest watermark given to Add or Advance: decides lateness
	swept  int64 // last watermark Advance dropped elements for
	keys   map[string]*keyState
	peak   int // largest len(keys) since the map was last reallocated
	due    dueHeap
	n      int              // buffered elements
	watch  func(key string) // see Watch; nil when no one watches
}

// keyState is the buffered state of one key.
type keyState struct {
	key   string
	sides [2]buffer
}

// buffer holds one side of one key, sorted by (Time, Seq), in
// elems[head:]. Because an element's last useful watermark grows with its
// time, Advance always drops a prefix. A non-empty buffer has one entry in
// the Operator's heap, at index idx, ordered by due: the last watermark at
// which its first element is still useful.
type buffer struct {
	ks    *keyState
	side  Side
	elems []*Element
	head  int
	due   int64
	idx   int // index in the heap, -1 when not in it
}

// New returns an Operator for spec, with cond as the extra join predicate
// (nil for none). It returns spec's validation error if spec is not usable.
func New(spec Spec, cond Condition) (*Operator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	lo, hi, _ := spec.effective()
	return &Operator{
		lo:    lo,
		hi:    hi,
		cond:  cond,
		wm:    math.MinInt64,
		swept: math.MinInt64,
		keys:  make(map[string]*keyState),
	}, nil
}

// reach returns the inclusive range [from, to] of times on the other side
// that an element of side at time t joins, saturated to the int64 range,
// and false when no int64 time is in it. to is also the last watermark at
// which the element can still join a future non-late element.
func (o *Operator) reach(side Side, t int64) (from, to int64, ok bool) {
	var fo, tov int
	if side == Left {
		from, fo = addSat(t, o.lo)
		to, tov = addSat(t, o.hi)
	} else {
		from, fo = subSat(t, o.hi)
		to, tov = subSat(t, o.lo)
	}
	return from, to, fo <= 0 && tov >= 0
}

// Add buffers el on side for key, given the current watermark wm
// (math.MinInt64 before any), and emits at once every pair it forms with
// the other side's buffered elements of the same key that are in range and
// meet the condition, in the other side's (Time, Seq) order. An element
// with Time < wm is late: it is not buffered, emits nothing, and Add returns
// false (the caller writes it to the late output). The watermark that
// decides lateness is the largest one the Operator has been given, by Add
// or Advance, so a stale wm cannot let in an element whose partners are
// already gone; Add drops nothing (Advance does). An element that is not
// late but can join no future element (its range lies below the watermark)
// emits its pairs and is not buffered. side must be Left or Right; emit runs
// synchronously and must not call back into the Operator.
func (o *Operator) Add(key string, side Side, el *Element, wm int64, emit func(Pair)) bool {
	o.wm = max(o.wm, wm)
	wm = o.wm
	if el.Time < wm {
		return false
	}
	from, to, ok := o.reach(side, el.Time)
	ks := o.keys[key]
	if ok && ks != nil {
		o.probe(&ks.sides[side^1], side, el, from, to, emit)
	}
	if !ok || to < wm {
		return true
	}
	if ks == nil {
		ks = &keyState{key: strings.Clone(key)}
		ks.sides[Left] = buffer{ks: ks, side: Left, idx: -1}
		ks.sides[Right] = buffer{ks: ks, side: Right, idx: -1}
		o.keys[key] = ks
		o.peak = max(o.peak, len(o.keys))
	}
	b := &ks.sides[side]
	if b.insert(el) {
		b.due = to
		if b.idx < 0 {
			heap.Push(&o.due, b)
		} else {
			heap.Fix(&o.due, b.idx)
		}
	}
	o.n++
	return true
}

// probe emits the pairs that el (on side) forms with the elements of other
// whose times are in [from, to].
func (o *Operator) probe(other *buffer, side Side, el *Element, from, to int64, emit func(Pair)) {
	elems := other.elems[other.head:]
	// Binary search for the first element with Time >= from.
	i, j := 0, len(elems)
	for i < j {
		m := int(uint(i+j) >> 1)
		if elems[m].Time < from {
			i = m + 1
		} else {
			j = m
		}
	}
	for _, x := range elems[i:] {
		if x.Time > to {
			break
		}
		l, r := el, x
		if side == Right {
			l, r = x, el
		}
		if o.cond == nil || o.cond(l, r) {
			emit(Pair{Left: l, Right: r, Time: max(l.Time, r.Time)})
		}
	}
}

// less orders elements by (Time, Seq).
func less(a, b *Element) bool {
	return a.Time < b.Time || a.Time == b.Time && a.Seq < b.Seq
}

// insert puts el into b in (Time, Seq) order and reports whether it became
// the first element (so that b's due time changed).
func (b *buffer) insert(el *Element) bool {
	n := len(b.elems)
	if n == b.head || less(b.elems[n-1], el) {
		// In-order arrival, the common case.
		b.elems = append(b.elems, el)
		return n == b.head
	}
	i, j := b.head, n
	for i < j {
		m := int(uint(i+j) >> 1)
		if less(b.elems[m], el) {
			i = m + 1
		} else {
			j = m
		}
	}
	if i == b.head && b.head > 0 {
		// Reuse the slot of a dropped element rather than shifting.
		b.head--
		b.elems[b.head] = el
		return true
	}
	b.elems = append(b.elems, nil)
	copy(b.elems[i+1:], b.elems[i:n])
	b.elems[i] = el
	return i == b.head
}

// Advance moves to watermark wm; a watermark that does not move forward is
// ignored (but counts for lateness, as in Add). Every element that no future non-late element can join any more
// is dropped: a left element l once wm > l.Time + Upper', a right element r
// once wm > r.Time - Lower' (Upper', Lower' after exclusivity). Keys with
// nothing buffered are forgotten. Advance costs O(log n) per key side that
// drops elements, plus O(1) per dropped element, and nothing for idle keys.
func (o *Operator) Advance(wm int64) {
	o.wm = max(o.wm, wm)
	if wm <= o.swept {
		return
	}
	o.swept = wm
	var watched *keyState // the key last reported to o.watch
	for len(o.due) > 0 && o.due[0].due < wm {
		b := o.due[0]
		// A buffer due here drops at least its first element: report the
		// key before. Both sides of a key often come out one after the
		// other, and the key is reported once for them.
		if o.watch != nil && b.ks != watched {
			watched = b.ks
			o.watch(b.ks.key)
		}
		for b.head < len(b.elems) {
			_, to, _ := o.reach(b.side, b.elems[b.head].Time)
			if to >= wm {
				break
			}
			b.elems[b.head] = nil
			b.head++
			o.n--
		}
		if b.head == len(b.elems) {
			heap.Pop(&o.due)
			b.elems, b.head = b.elems[:0], 0
			if ks := b.ks; ks.sides[b.side^1].head == len(ks.sides[b.side^1].elems) {
				delete(o.keys, ks.key)
			}
			continue
		}
		b.compact()
		_, b.due, _ = o.reach(b.side, b.elems[b.head].Time)
		heap.Fix(&o.due, 0)
	}
	o.shrink()
}

// NextDue returns the earliest watermark at which Advance drops elements
// of key (their due, plus one: Advance drops below the watermark), or
// math.MaxInt64 when it holds nothing for key.
func (o *Operator) NextDue(key string) int64 {
	at := int64(math.MaxInt64)
	if ks := o.keys[key]; ks != nil {
		for side := range ks.sides {
			if b := &ks.sides[side]; b.idx >= 0 && b.due < at {
				at = b.due + 1 // b.due < MaxInt64: at is MaxInt64 until here
			}
		}
	}
	return at
}

// RemoveKey forgets key's buffers without reporting anything. It is for a
// caller that keeps the state elsewhere meanwhile (EncodeKey) and gives it
// back with DecodeKey before the watermark reaches NextDue, and before the
// key's next element.
func (o *Operator) RemoveKey(key string) {
	ks := o.keys[key]
	if ks == nil {
		return
	}
	for side := range ks.sides {
		b := &ks.sides[side]
		if b.idx >= 0 {
			heap.Remove(&o.due, b.idx)
		}
		o.n -= len(b.live())
	}
	delete(o.keys, key)
	o.shrink()
}

// Watch sets fn (nil: none) to be called with a key before the Operator
// changes the key's state on its own, that is in Advance: before it drops
// elements of the key, and so before it forgets the key. It is what an
// incremental checkpoint needs to know which keys to write again. fn runs
// while EncodeKey(key) still gives the state before the change, so that a
// checkpoint being written can save it first. A key may be reported more
// than once in one Advance.
//
// Changes the caller makes to a key with Add are not reported, nor are the
// whole-state replacements Decode and DecodeHeader; Add changes no other
// key. fn runs on the task's goroutine in the middle of Advance: it may
// call HasKey and EncodeKey (and other reads) but nothing that changes the
// Operator.
func (o *Operator) Watch(fn func(key string)) { o.watch = fn }

// compact moves the live elements of b to the front once the dropped prefix
// is at least half the slice, so that a long-lived key's buffer does not
// grow with the number of elements it has ever held.
func (b *buffer) compact() {
	if b.head == 0 || b.head < len(b.elems)-b.head {
		return
	}
	n := copy(b.elems, b.elems[b.head:])
	clear(b.elems[n:])
	b.elems, b.head = b.elems[:n], 0
}

// shrink reallocates the key map and the heap when they have fallen below a
// quarter of their peak, since Go maps and slices never give memory back.
func (o *Operator) shrink() {
	const minPeak = 1024
	if o.peak >= minPeak && len(o.keys) < o.peak/4 {
		keys := make(map[string]*keyState, len(o.keys))
		for k, ks := range o.keys {
			keys[k] = ks
		}
		o.keys, o.peak = keys, len(keys)
	}
	if cap(o.due) >= minPeak && len(o.due) < cap(o.due)/4 {
		o.due = append(make(dueHeap, 0, 2*len(o.due)), o.due...)
	}
}

// Len returns the number of buffered elements (both sides, all keys).
func (o *Operator) Len() int { return o.n }

// dueHeap is a min-heap of the non-empty buffers by due time
// (container/heap), so that Advance finds the buffers to drop from without
// visiting idle keys.
type dueHeap []*buffer

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *dueHeap) Push(x any) {
	b := x.(*buffer)
	b.idx = len(*h)
	*h = append(*h, b)
}

func (h *dueHeap) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	b.idx = -1
	*h = old[:len(old)-1]
	return b
}
