package window

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/prefetch"
)

// Result is one firing of one window of one key.
type Result struct {
	Key string
	// Start and End bound the window: [Start, End).
	Start, End int64
	// Values holds one value per Aggregate, in order: int64 for Count and
	// CountDistinct; float64 for Sum (0 when the window saw no numeric
	// argument); float64 or nil (no numeric argument) for Min, Max and Avg.
	// The slice is the caller's to keep.
	Values []any
	// Update is true when this window already fired before: a late firing
	// within the allowed lateness, or a session that merged a fired session.
	Update bool
}

// Operator holds the state of one window definition for all keys of one
// task. It is not safe for concurrent use: the task's goroutine owns it.
// See the package documentation for its invariants.
type Operator struct {
	spec  Spec
	kinds []AggKind // the kinds of the aggregates, in order
	nAccs int       // accumulators per window: 0 when all aggregates are Count
	wm    int64

	keys     keyIndex
	keysPeak int // most keys since the index was last shrunk
	timers   timerHeap

	watch func(key string) // see Watch; nil when no one watches
	// lagging says windows may be overdue (Raise): Add catches its key up.
	lagging bool
}

// keyState holds the live windows of one key, sorted by (start, end).
// Sessions of a key never overlap or touch, so they are sorted by end too.
type keyState struct {
	key    string
	wins   []*window
	inline [2]*window // first backing array of wins: most keys have one or two windows
	op     *Operator  // the operator whose keys hold it, while live
	live   bool       // in op.keys: a Key that holds it may use it
	pos    int32      // its position in op.keys (keyIndex), while live
	// own is the window allocated with the key's state (keyBlock), or nil;
	// ownFree says it is in no list (wins, the timer heap) and newWindow
	// may take it.
	own     *window
	ownFree bool
}

// keyBlock is a key's state and room for one window, allocated together:
// adding to a key's only window, the common case, then reads one allocation
// rather than two (a cache miss per element fewer on a large key set).
type keyBlock struct {
	ks   keyState
	w    window
	accs [blockAccs]acc
}

// blockAccs is the most accumulators a keyBlock's window has room for.
const blockAccs = 4

// Key is a handle on one key's state in an Operator, for a caller that keeps
// per-key state of its own: AddKey with the same Key skips looking the key
// up (a hash and a cache miss per element, about 5% of a replay). The zero
// Key is empty; AddKey fills it, and looks the key up again when the state
// it holds has been dropped (every window of the key purged) or replaced (a
// restore), or belongs to another Operator.
type Key struct{ ks *keyState }

// window is one live window of one key.
type window struct {
	key        string
	ks         *keyState
	start, end int64
	at         int64 // due time of its timer: end-1 while armed, else cleanup
	idx        int   // position in the timer heap
	armed      bool  // has not fired since its end-1 last moved past the watermark
	fired      bool  // it, or a session merged into it, has fired
	count      int64 // elements added
	accs       []acc // one per aggregate
}

// New returns an Operator for spec computing aggs. It reports the errors of
// spec.Validate, and an error for an aggregate with an invalid kind or an
// empty or repeated name.
func New(spec Spec, aggs []Aggregate) (*Operator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	kinds := make([]AggKind, len(aggs))
	for i, a := range aggs {
		switch {
		case a.Name == "":
			return nil, fmt.Errorf("window: aggregate %d (%s): empty name", i, a.Kind)
		case !a.Kind.valid():
			return nil, fmt.Errorf("window: aggregate %q: unknown kind %d", a.Name, a.Kind)
		}
		for _, b := range aggs[:i] {
			if b.Name == a.Name {
				return nil, fmt.Errorf("window: aggregate %q: duplicate name", a.Name)
			}
		}
		kinds[i] = a.Kind
	}
	nAccs := 0
	if slices.ContainsFunc(kinds, func(k AggKind) bool { return k != Count }) {
		nAccs = len(kinds) // one per aggregate, so that accs[i] is aggs[i]'s
	}
	return &Operator{
		spec:  spec,
		kinds: kinds,
		nAccs: nAccs,
		wm:    math.MinInt64,
	}, nil
}

// Len returns the number of live windows across keys.
func (o *Operator) Len() int { return len(o.timers) }

// Add assigns an element of key at event time t to its windows. args[i] is
// the argument of aggs[i]; it is ignored for Count, and nil or non-numeric
// values are skipped by Sum, Min, Max and Avg. Missing trailing arguments
// count as nil (a count-only definition may pass nil args).
//
// wm is the current watermark (math.MinInt64 before any). Add first advances
// the operator to wm as Advance does, so a watermark the operator has not
// seen yet fires and drops windows (through emit) before the element is
// assigned; a wm below the operator's watermark is raised to it.
//
// A window accepts the element unless its cleanup time end-1+AllowedLateness
// is at or before the watermark. A window that accepts the element while its
// end-1 is at or before the watermark fires at once through emit (Update is
// true if it fired before); several such windows of a sliding definition fire
// in order of start. Add returns false when no window accepted the element:
// it is late, and the caller sends it to the late side output.
//
// Add keeps key for as long as the key has windows. A key that is a slice
// of a large buffer keeps all of it in memory, so a caller that reads keys
// from records passes a copy (the engine passes its key's own string, which
// every operator of the key shares).
//
// emit must not call back into the Operator.
func (o *Operator) Add(key string, t int64, args []any, wm int64, emit func(Result)) bool {
	var k Key
	return o.AddKey(&k, key, t, args, wm, emit)
}

// AddKey is Add with a Key handle on key's state (see Key): k must have been
// used with this key only.
func (o *Operator) AddKey(k *Key, key string, t int64, args []any, wm int64, emit func(Result)) bool {
	if wm > o.wm {
		o.Advance(wm, emit)
	}
	ks := k.ks
	if ks == nil || !ks.live || ks.op != o {
		ks = o.keys.get(key)
	}
	if o.lagging && ks != nil {
		o.catchUp(ks, emit) // may drop ks: then it is not live
		if !ks.live {
			ks = nil
		}
	}
	var ok bool
	switch o.spec.Kind {
	case Tumbling:
		r := alignRem(t, o.spec.Offset, o.spec.Size)
		ks, _, ok = o.addFixed(ks, key, 0, satSub(t, r), satAdd(t, o.spec.Size-r), args, emit)
	case Sliding:
		ks, ok = o.addSliding(ks, key, t, args, emit)
	default:
		ks, ok = o.addSession(ks, key, t, args, emit)
	}
	k.ks = ks
	return ok
}

// addSliding adds the element to every sliding window that contains t, in
// order of start. The window with offset off from t is
// [t-off, t-off+size); off runs over r, r+slide, … below size.
func (o *Operator) addSliding(ks *keyState, key string, t int64, args []any, emit func(Result)) (*keyState, bool) {
	size, slide := o.spec.Size, o.spec.Slide
	r := alignRem(t, o.spec.Offset, slide)
	next, accepted := 0, false
	for off := r + (size-1-r)/slide*slide; off >= r; off -= slide {
		var ok bool
		// The element's windows follow each other in ks.wins: each search
		// starts after the previous window.
		ks, next, ok = o.addFixed(ks, key, next, satSub(t, off), satAdd(t, size-off), args, emit)
		accepted = accepted || ok
	}
	return ks, accepted
}

// addFixed adds an element to the tumbling or sliding window [start, end) of
// key, creating the window (and ks, the key's state, when nil) if needed.
// Every window before position from of ks.wins sorts before [start, end).
// It returns ks, the position after the window, and whether the window
// accepted the element.
func (o *Operator) addFixed(ks *keyState, key string, from int, start, end int64, args []any, emit func(Result)) (*keyState, int, bool) {
	if o.cleanupTime(end) <= o.wm {
		return ks, from, false // every live window has a later cleanup time: none to look up
	}
	if ks == nil {
		ks = o.newKey(key)
	}
	i, found := ks.searchFrom(from, start, end)
	var w *window
	if found {
		w = ks.wins[i]
	} else {
		w = o.newWindow(ks, start, end)
		ks.wins = slices.Insert(ks.wins, i, w)
	}
	w.add(o.kinds, args)
	change := timerKept
	if !found {
		change = timerNew
	}
	o.settle(w, change, emit)
	return ks, i + 1, true
}

// addSession adds the element's session [t, t+gap) to key, merging it with
// every session it overlaps or touches.
func (o *Operator) addSession(ks *keyState, key string, t int64, args []any, emit func(Result)) (*keyState, bool) {
	start, end := t, satAdd(t, o.spec.Gap)
	var lo, hi int
	if ks != nil {
		// Sessions are disjoint and sorted, so the ones that intersect
		// [start, end) (Flink: s.start <= end && s.end >= start) are a run.
		lo = sort.Search(len(ks.wins), func(i int) bool { return ks.wins[i].end >= start })
		hi = lo + sort.Search(len(ks.wins)-lo, func(i int) bool { return ks.wins[lo+i].start > end })
	}
	if lo == hi {
		// No session to join. Live sessions all have a cleanup time after the
		// watermark, so only a session on its own can be late.
		if o.cleanupTime(end) <= o.wm {
			return ks, false
		}
		if ks == nil {
			ks = o.newKey(key)
		}
		w := o.newWindow(ks, start, end)
		ks.wins = slices.Insert(ks.wins, lo, w)
		w.add(o.kinds, args)
		o.settle(w, timerNew, emit)
		return ks, true
	}
	w := ks.wins[lo]
	start, end = min(w.start, start), max(ks.wins[hi-1].end, end)
	for _, x := range ks.wins[lo+1 : hi] {
		w.merge(o.kinds, x)
		o.timers.remove(x.idx)
		ks.release(x)
	}
	ks.wins = slices.Delete(ks.wins, lo+1, hi)
	// w keeps its place among the key's sessions: it was the first merged.
	w.start, w.end = start, end
	w.add(o.kinds, args)
	o.settle(w, timerMoved, emit)
	return ks, true
}

// timerChange says how a window's timer entry relates to the heap when
// settle runs.
type timerChange uint8

const (
	timerNew   timerChange = iota // not in the heap yet
	timerKept                     // in the heap; start and end unchanged
	timerMoved                    // in the heap; start or end changed
)

// settle schedules w after an element was added to it: it fires at once
// when its end-1 has been reached (a late firing), and its timer is due at
// end-1 or at its cleanup time.
func (o *Operator) settle(w *window, change timerChange, emit func(Result)) {
	at := w.end - 1
	w.armed = at > o.wm
	if !w.armed {
		o.fire(w, emit)
		at = o.cleanupTime(w.end)
	}
	switch {
	case change == timerNew:
		w.at = at
		o.timers.push(w)
	case change == timerMoved || at != w.at:
		w.at = at
		o.timers.fix(w.idx)
	}
}

// Advance moves the operator to watermark wm; a wm at or below the current
// watermark moves nothing, but still works off what a Raise left overdue.
// Every window with end-1 <= wm that has not fired yet fires through emit, in
// order of (end-1, key, start); then every window with end-1+AllowedLateness
// <= wm is dropped, and so is a key with no windows left. It costs O(log n)
// per fired or dropped window.
//
// emit must not call back into the Operator.
func (o *Operator) Advance(wm int64, emit func(Result)) {
	o.Raise(wm)
	o.Drain(emit, nil)
}

// Raise moves the operator to watermark wm as Advance does, but fires and
// drops nothing yet: the windows due at or before wm become overdue. Drain
// works them off in Advance's order, a few at a time, and CatchUp does so
// for one key; Add and AddKey catch their key up first. So every key sees
// the firings and drops Advance would have made, in the same order, before
// anything else happens to its windows; only the order across keys changes
// (docs/design.md "Firing in slices"). Until Overdue reports false, a caller
// catches a key up before it reads the key's windows (Live, HasKey,
// EncodeKey, NextTimer), and drains them all before it reads the whole
// state (Encode, Keys). A wm at or below the current watermark does nothing.
func (o *Operator) Raise(wm int64) {
	if wm > o.wm {
		o.wm = wm
		o.lagging = o.Overdue()
	}
}

// Overdue reports whether windows due at the watermark have yet to fire or
// be dropped: a Raise that Drain has not worked off.
func (o *Operator) Overdue() bool { return len(o.timers) > 0 && o.timers[0].at <= o.wm }

// Drain fires and drops the overdue windows (Raise) in Advance's order
// until none is left, or until more (asked before each window; nil: go on)
// reports false; it reports whether none is left.
//
// emit must not call back into the Operator.
func (o *Operator) Drain(emit func(Result), more func() bool) bool {
	dropped := false
	defer func() {
		if dropped {
			o.shrink()
		}
	}()
	var watched *keyState // the key last reported to o.watch
	for len(o.timers) > 0 && o.timers[0].at <= o.wm {
		if more != nil && !more() {
			return false
		}
		w := o.timers[0].w
		// Every entry due here fires (setting fired) or drops its window:
		// report the key before either. A key's entries due at the same
		// time leave the heap one after another, so it is reported once
		// for them.
		if o.watch != nil && w.ks != watched {
			watched = w.ks
			o.watch(w.key)
		}
		dropped = o.expire(w, emit) || dropped
	}
	o.lagging = false
	return true
}

// CatchUp fires and drops key's overdue windows (Raise), in the order
// Advance would have; it does nothing for a key with none.
//
// emit must not call back into the Operator.
func (o *Operator) CatchUp(key string, emit func(Result)) {
	if o.lagging {
		if ks := o.keys.get(key); ks != nil {
			o.catchUp(ks, emit)
		}
	}
}

// catchUp is CatchUp for the state of a key that is live.
func (o *Operator) catchUp(ks *keyState, emit func(Result)) {
	reported := false
	for {
		// The key's next entry in the heap's order (windowLess within one
		// key): its windows are few, so a scan finds it.
		var next *window
		for _, w := range ks.wins {
			if w.at <= o.wm && (next == nil || windowLess(w, next)) {
				next = w
			}
		}
		if next == nil {
			return
		}
		if o.watch != nil && !reported {
			reported = true
			o.watch(ks.key)
		}
		if o.expire(next, emit) {
			o.shrink()
		}
	}
}

// expire acts on w, whose timer is due: it fires w if it is armed, then
// drops it if its cleanup time is due too, and reports whether it did.
func (o *Operator) expire(w *window, emit func(Result)) bool {
	if w.armed {
		// Fire entries leave the heap in (end-1, key, start) order;
		// cleanup entries in between emit nothing.
		o.fire(w, emit)
		w.armed = false
		w.at = o.cleanupTime(w.end)
		if w.at > o.wm {
			o.timers.fix(w.idx)
			return false
		}
	}
	o.timers.remove(w.idx)
	o.drop(w)
	return true
}

// Watch sets fn (nil: none) to be called with a key before the operator
// changes the key's state on its own, that is in Advance (which Add and
// AddKey run first, for the watermark they are given): before a window
// fires, which sets its fired flag, and before windows or the key itself
// are dropped at cleanup. It is what an incremental checkpoint needs to
// know which keys to write again. fn runs while EncodeKey(key) still gives
// the state before the change, so that a checkpoint being written can save
// it first. A key may be reported more than once in one Advance, and
// reported without its encoding changing (an update firing of a session
// that had fired).
//
// What Add and AddKey do to their own key is not reported (the Advance
// they start with reports as Advance does), nor are the whole-state
// replacements Decode and DecodeHeader. fn runs on the task's goroutine in
// the middle of Advance: it may call HasKey and EncodeKey (and other reads)
// but nothing that changes the operator.
func (o *Operator) Watch(fn func(key string)) { o.watch = fn }

// cleanupTime is the watermark at which the state of a window ending at end
// is dropped: end-1+AllowedLateness, saturated.
func (o *Operator) cleanupTime(end int64) int64 {
	return satAdd(end-1, o.spec.AllowedLateness)
}

// fire emits the current result of w, as an update if w fired before.
func (o *Operator) fire(w *window, emit func(Result)) {
	vals := make([]any, len(o.kinds))
	for i, k := range o.kinds {
		if k == Count {
			vals[i] = w.count
		} else {
			vals[i] = w.accs[i].value(k)
		}
	}
	update := w.fired
	w.fired = true
	emit(Result{Key: w.key, Start: w.start, End: w.end, Values: vals, Update: update})
}

// newKey adds the state of a key, which keeps key as it is (Add).
func (o *Operator) newKey(key string) *keyState {
	ks := o.allocKey(key)
	o.keys.add(ks)
	o.keysPeak = max(o.keysPeak, o.keys.len())
	return ks
}

// allocKey allocates the state of key, not yet in o.keys, with room for one
// window when the operator's windows fit a keyBlock.
func (o *Operator) allocKey(key string) *keyState {
	b := new(keyBlock)
	ks := &b.ks
	ks.key, ks.op, ks.live = key, o, true
	ks.wins = ks.inline[:0]
	if o.nAccs <= blockAccs {
		b.w.accs = b.accs[:o.nAccs]
		ks.own, ks.ownFree = &b.w, true
	}
	return ks
}

// newWindow allocates the window [start, end) of ks, not yet in ks.wins or
// in the timer heap: the key's own window when it is free.
func (o *Operator) newWindow(ks *keyState, start, end int64) *window {
	var w *window
	if ks.ownFree {
		w, ks.ownFree = ks.own, false
		accs := w.accs
		clear(accs)
		*w = window{accs: accs}
	} else {
		w = allocWindow(o.nAccs)
	}
	w.key, w.ks, w.start, w.end = ks.key, ks, start, end
	return w
}

// release frees w, which has left ks.wins and the timer heap: when it is
// the key's own window, the next newWindow of the key takes it again.
func (ks *keyState) release(w *window) {
	if w == ks.own {
		ks.ownFree = true
	}
}

// allocWindow allocates a window with n accumulators. Up to four share the
// window's allocation, so that updating a window touches one object.
func allocWindow(n int) *window {
	switch n {
	case 0:
		return new(window)
	case 1:
		b := new(struct {
			w window
			a [1]acc
		})
		b.w.accs = b.a[:]
		return &b.w
	case 2:
		b := new(struct {
			w window
			a [2]acc
		})
		b.w.accs = b.a[:]
		return &b.w
	case 3:
		b := new(struct {
			w window
			a [3]acc
		})
		b.w.accs = b.a[:]
		return &b.w
	case 4:
		b := new(struct {
			w window
			a [4]acc
		})
		b.w.accs = b.a[:]
		return &b.w
	}
	return &window{accs: make([]acc, n)}
}

// drop removes a window that left the timer heap from its key, and the key
// when it has no windows left.
func (o *Operator) drop(w *window) {
	ks := w.ks
	if i, found := ks.search(w.start, w.end); found {
		ks.wins = slices.Delete(ks.wins, i, i+1)
	}
	ks.release(w)
	if len(ks.wins) == 0 {
		o.keys.remove(ks)
		ks.live = false
	}
}

// NextTimer returns the earliest watermark at which the operator changes
// key's state on its own (fires or drops one of its windows in Advance), or
// math.MaxInt64 when it holds no state for key.
func (o *Operator) NextTimer(key string) int64 {
	at := int64(math.MaxInt64)
	if ks := o.keys.get(key); ks != nil {
		for _, w := range ks.wins {
			at = min(at, w.at)
		}
	}
	return at
}

// RemoveKey forgets key's state without firing or reporting anything. It is
// for a caller that keeps the state elsewhere meanwhile (EncodeKey) and
// gives it back with DecodeKey before the watermark reaches NextTimer, and
// before the key's next element: the operator then goes on exactly as if
// it had kept the state (the timer heap orders windows strictly, so where
// they were pushed changes no firing).
func (o *Operator) RemoveKey(key string) {
	ks := o.keys.get(key)
	if ks == nil {
		return
	}
	for _, w := range ks.wins {
		o.timers.remove(w.idx)
	}
	ks.wins = nil
	o.keys.remove(ks)
	ks.live = false
	o.shrink()
}

// shrinkMin is the size below which the key index and the timer heap are
// not reallocated to give memory back.
const shrinkMin = 1024

// shrink reallocates the key index and the timer heap once they hold less
// than a quarter of their peak, because neither gives memory back on its
// own. The copy is paid for by the deletions since the peak.
func (o *Operator) shrink() {
	if o.keysPeak >= shrinkMin && o.keys.len() < o.keysPeak/4 {
		o.keys.shrink()
		o.keysPeak = o.keys.len()
	}
	if cap(o.timers) >= shrinkMin && len(o.timers) < cap(o.timers)/4 {
		o.timers = append(make(timerHeap, 0, 2*len(o.timers)), o.timers...)
	}
}

// search finds the window [start, end) in ks, or where to insert it.
func (ks *keyState) search(start, end int64) (int, bool) {
	return ks.searchFrom(0, start, end)
}

// searchFrom is search for a window known to sort at or after position
// from. It looks at ks.wins[from] first: a key's only window, or the next
// window of a sliding element, is usually there.
func (ks *keyState) searchFrom(from int, start, end int64) (int, bool) {
	cmpWindow := func(w *window, _ int64) int {
		return cmp.Or(cmp.Compare(w.start, start), cmp.Compare(w.end, end))
	}
	if from == len(ks.wins) {
		return from, false
	}
	switch c := cmpWindow(ks.wins[from], 0); {
	case c == 0:
		return from, true
	case c > 0:
		return from, false
	}
	i, found := slices.BinarySearchFunc(ks.wins[from+1:], 0, cmpWindow)
	return from + 1 + i, found
}

// add folds one element into w.
func (w *window) add(kinds []AggKind, args []any) {
	w.count++
	for i := range w.accs {
		var v any
		if i < len(args) {
			v = args[i]
		}
		w.accs[i].add(kinds[i], v)
	}
}

// merge folds the state of session x into w; x is discarded afterwards.
func (w *window) merge(kinds []AggKind, x *window) {
	w.count += x.count
	w.fired = w.fired || x.fired
	for i := range w.accs {
		w.accs[i].merge(kinds[i], &x.accs[i])
	}
}

// Prefetch starts loading the state AddKey will read through k: the key's
// state and, when they were allocated together (keyBlock), its first window.
func (k Key) Prefetch() {
	if k.ks != nil {
		prefetch.Range(unsafe.Pointer(k.ks), unsafe.Sizeof(keyBlock{}))
	}
}
