package window

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/vigil-cep/vigil/internal/codec"
)

// Checkpoint encoding of an Operator (written by Encode, read by Decode).
//
// A task snapshots its operators so that, restored after a crash, they go on
// exactly as the originals would have: the same results in the same order,
// the same update flags and the same late decisions. The encoding therefore
// holds everything those depend on, and only that; it is a function of the
// state alone (keys sorted, distinct sets in canonical order) and Decode
// accepts only that canonical form, so Encode(Decode(b)) == b, as for the
// checkpoint file itself (package state). In the notation of package state
// (u = Uvarint, s = Varint):
//
//	version   u  stateVersion (1)
//	spec      u kind, s size, s slide, s offset, s gap, s allowed lateness
//	aggs      u count, then u kind per aggregate
//	wm        s  the watermark
//	keys      u count, then per key in increasing byte order:
//	            key string, u window count, then per window in (start, end) order:
//	              start   s for the first window, u start-previous start after it
//	              length  u end-start (≥ 1, but 0 for [MaxInt64, MaxInt64))
//	              fired   bool
//	              count   u elements added (≥ 1)
//	              per aggregate other than Count, in order:
//	                Sum, Avg, Min, Max: u n, then f (8 bytes) when n > 0
//	                CountDistinct: u size, then the values in canonical order,
//	                  each a u tag (distinctNaN … distinctString) and its payload
//
// An incremental checkpoint writes the same bytes in pieces: EncodeHeader
// the fields before the key count, EncodeKey a key's part after its string
// (the empty form, a window count of 0, for a key without state), and
// DecodeHeader and DecodeKey read them back in any key order. A key's part
// stays valid against the header of a later watermark as long as Watch did
// not report the key in between: none of its windows fired or reached its
// cleanup time, so each is still live and armed (or fired) as before.
//
// The timer heap is not written: its entries are derived from each window
// (armed iff end-1 > wm, due at end-1 while armed and at the cleanup time
// afterwards), and windowLess is a strict total order over live windows —
// (at, key, start, end), and a key's windows differ in (start, end) — so
// whatever the layout of the heap, windows leave it in one order. Decode
// rebuilds it from that order, and emission order is the original's.
//
// Neither is the capacity of the key index or of the timer heap (keysPeak,
// cap): they decide only when memory is given back, never a result.
//
// Decode checks what the operator relies on, not only the syntax: windows of
// the spec's shape, sorted and (for sessions) neither overlapping nor
// touching, live (cleanup time after the watermark), fired once their end-1
// is at or before the watermark, and accumulators that agree with their
// window's element count and hold distinct values only in the form
// distinctKey gives them. A state that passes has every invariant the
// operator's code relies on, so a damaged but well-formed section cannot
// make it panic or corrupt its state later. Damage that yields another valid
// state (a flipped bit in a sum or a key) cannot be told from real state
// without redundancy; the checkpoint file's CRC-32C catches it (package
// state).
const stateVersion = 1

// Tags of the values in a CountDistinct set, in the order Encode sorts them.
// Each stands for one of the types distinctKey produces.
const (
	distinctNaN    = iota // nanKey{}: no payload
	distinctFalse         // false: no payload
	distinctTrue          // true: no payload
	distinctInt           // int64: s
	distinctUint          // uint64 above math.MaxInt64: u
	distinctFloat         // float64 that floatKey keeps as a float: 8 bytes
	distinctString        // string
)

// Encode writes the operator's state (every key's windows and their
// accumulators, including count_distinct sets, fired/late state, timers) to
// e. The same state always gives the same bytes. It fails only if the state
// holds a value it cannot represent, which would be a bug of this package.
//
// It is EncodeHeader, the key count, and String(key) followed by EncodeKey
// for every key in increasing byte order: an incremental checkpoint that
// writes the header and some keys with those writes the same bytes per key.
func (o *Operator) Encode(e *codec.Encoder) error {
	o.EncodeHeader(e)
	keys := slices.SortedFunc(o.keys.all(), func(a, b *keyState) int { return strings.Compare(a.key, b.key) })
	e.Int(len(keys))
	var vals []any // reused for every distinct set
	for _, ks := range keys {
		e.String(ks.key)
		var err error
		if vals, err = o.encodeKey(e, ks, vals); err != nil {
			return err
		}
	}
	return nil
}

// EncodeHeader writes what Encode writes before the key count: the format
// version, the definition (spec and aggregate kinds) and the watermark. The
// per-key encodings (EncodeKey) are read against it: whether a window must
// have fired, or is still live, depends on the watermark.
func (o *Operator) EncodeHeader(e *codec.Encoder) {
	e.Uvarint(stateVersion)
	o.encodeSpec(e)
	e.Varint(o.wm)
}

// Keys yields every key the operator holds state for, in no particular
// order (for range op.Keys). The operator must not change meanwhile.
func (o *Operator) Keys(yield func(key string) bool) {
	for ks := range o.keys.all() {
		if !yield(ks.key) {
			return
		}
	}
}

// HasKey reports whether o holds state (at least one live window) for key.
func (o *Operator) HasKey(key string) bool { return o.keys.get(key) != nil }

// EncodeKey writes the state of one key as Encode writes it after the key's
// string: the window count, then the windows. A key without state writes
// the empty form, a count of 0, which DecodeKey accepts and Decode refuses
// (Encode never writes a key without windows). It fails only as Encode
// does.
func (o *Operator) EncodeKey(e *codec.Encoder, key string) error {
	ks := o.keys.get(key)
	if ks == nil {
		e.Int(0)
		return nil
	}
	_, err := o.encodeKey(e, ks, nil)
	return err
}

// encodeKey writes the windows of ks, using vals as scratch space for the
// distinct sets, and returns vals for reuse.
func (o *Operator) encodeKey(e *codec.Encoder, ks *keyState, vals []any) ([]any, error) {
	e.Int(len(ks.wins))
	for i, w := range ks.wins {
		if i == 0 {
			e.Varint(w.start)
		} else {
			// Windows are sorted by start: the difference fits and is
			// small, where absolute epoch milliseconds take six bytes.
			e.Uvarint(uint64(w.start) - uint64(ks.wins[i-1].start))
		}
		e.Uvarint(uint64(w.end) - uint64(w.start))
		e.Bool(w.fired)
		e.Uvarint(uint64(w.count))
		for j, k := range o.kinds {
			switch k {
			case Count:
			case CountDistinct:
				var err error
				if vals, err = encodeDistinct(e, w.accs[j].set, vals[:0]); err != nil {
					return vals, fmt.Errorf("window: key %q window [%d,%d): %w", ks.key, w.start, w.end, err)
				}
			default:
				a := &w.accs[j]
				e.Uvarint(uint64(a.n))
				if a.n > 0 {
					e.Float64(a.f)
				}
			}
		}
	}
	return vals, nil
}

// encodeSpec writes what New was given, so that Decode can refuse the state
// of another definition instead of misreading it.
func (o *Operator) encodeSpec(e *codec.Encoder) {
	s := o.spec
	e.Uvarint(uint64(s.Kind))
	e.Varint(s.Size)
	e.Varint(s.Slide)
	e.Varint(s.Offset)
	e.Varint(s.Gap)
	e.Varint(s.AllowedLateness)
	e.Int(len(o.kinds))
	for _, k := range o.kinds {
		e.Uvarint(uint64(k))
	}
}

// encodeDistinct writes a distinct set in canonical order, using vals as
// scratch space, and returns vals for reuse.
func encodeDistinct(e *codec.Encoder, set map[any]struct{}, vals []any) ([]any, error) {
	for v := range set {
		if _, ok := distinctTag(v); !ok {
			return vals, fmt.Errorf("cannot encode a distinct value of type %T", v)
		}
		vals = append(vals, v)
	}
	slices.SortFunc(vals, compareDistinct)
	e.Int(len(vals))
	for _, v := range vals {
		tag, _ := distinctTag(v)
		e.Uvarint(uint64(tag))
		switch x := v.(type) {
		case int64:
			e.Varint(x)
		case uint64:
			e.Uvarint(x)
		case float64:
			e.Float64(x)
		case string:
			e.String(x)
		}
	}
	return vals, nil
}

// distinctTag returns the tag of a value distinctKey produces.
func distinctTag(v any) (int, bool) {
	switch x := v.(type) {
	case nanKey:
		return distinctNaN, true
	case bool:
		if x {
			return distinctTrue, true
		}
		return distinctFalse, true
	case int64:
		return distinctInt, true
	case uint64:
		return distinctUint, true
	case float64:
		return distinctFloat, true
	case string:
		return distinctString, true
	}
	return 0, false
}

// compareDistinct is the canonical order of distinct values: by tag, then
// by value. It is a strict total order on what distinctKey produces (float
// keys are never NaN, and never ±0, which are integral and become int64).
func compareDistinct(a, b any) int {
	ta, _ := distinctTag(a)
	tb, _ := distinctTag(b)
	if c := cmp.Compare(ta, tb); c != 0 {
		return c
	}
	switch x := a.(type) {
	case int64:
		return cmp.Compare(x, b.(int64))
	case uint64:
		return cmp.Compare(x, b.(uint64))
	case float64:
		return cmp.Compare(x, b.(float64))
	case string:
		return strings.Compare(x, b.(string))
	}
	return 0 // nanKey, false, true: one value per tag
}

// Decode replaces the state of o, a fresh operator built by New with the same
// Spec and aggregates, with what Encode wrote. Corrupt input is reported
// through d (d.Fail) and returned as an error; it never panics and never
// allocates more than the input justifies (counts are read with d.Count).
//
// State written for another Spec or other aggregate kinds is refused with an
// error that names both. On error o is left as it was. Decode reads only its
// own section: the caller checks d.Finish when the section ends.
//
// It reads what DecodeHeader and DecodeKey read, with the same checks, and
// refuses besides keys out of order or repeated and keys without windows,
// which Encode never writes. Unlike a run of DecodeKey calls, which adds
// each key once it passed, it builds the whole state aside and installs it
// only once all of it passed, so that a failure leaves o as it was.
func (o *Operator) Decode(d *codec.Decoder) error {
	wm, err := o.decodeHeader(d)
	if err != nil {
		return err
	}
	nKeys := d.Count(2 + o.minWindowBytes()) // key length, window count, one window
	var keys keyIndex
	keys.reserve(nKeys)
	var timers timerHeap
	prevKey := ""
	for i := range nKeys {
		key := d.String()
		if d.Err() != nil {
			return d.Err()
		}
		if i > 0 && key <= prevKey {
			d.Fail("key %q does not follow key %q", key, prevKey)
			return d.Err()
		}
		prevKey = key
		ks := o.decodeKey(d, key, wm, false)
		if d.Err() != nil {
			return d.Err()
		}
		keys.add(ks)
		for _, w := range ks.wins {
			timers = append(timers, newTimerEntry(w))
		}
	}
	if d.Err() != nil {
		return d.Err()
	}

	// A slice sorted by the heap's order is a valid heap; as that order is
	// strict and total, it is also exactly the order in which the original
	// heap would have given its windows up.
	slices.SortFunc(timers, func(a, b timerEntry) int {
		switch {
		case a.less(b):
			return -1
		case b.less(a):
			return 1
		}
		return 0
	})
	for i, e := range timers {
		e.w.idx = i
	}
	o.replace(wm, keys, timers)
	return nil
}

// DecodeHeader reads what EncodeHeader wrote into o, an operator built by
// New with the same Spec and aggregates, with the checks of Decode: state of
// another definition or format version is refused with the same errors.
// Like Decode, it replaces o's state: o then holds no key, and its
// watermark is the header's, against which DecodeKey checks every key. On
// error o is left as it was.
func (o *Operator) DecodeHeader(d *codec.Decoder) error {
	wm, err := o.decodeHeader(d)
	if err != nil {
		return err
	}
	o.replace(wm, keyIndex{}, nil)
	return nil
}

// Reserve makes room for n keys in all: a restore that knows how many keys
// it may add with DecodeKey (at most n) calls it after DecodeHeader, so that
// the key index does not grow and rehash on the way.
func (o *Operator) Reserve(n int) { o.keys.reserve(n) }

// PrefetchKey starts loading what DecodeKey(key) will look at first in o's
// key index: a restore of many keys calls it a few keys ahead, so that the
// index's cache misses overlap the decoding of the keys before.
func (o *Operator) PrefetchKey(key string) { o.keys.prefetch(key) }

// DecodeKey reads the state of key as EncodeKey wrote it and adds it to o,
// after DecodeHeader. It checks what Decode checks of a key's windows (their
// shape and order, that they are live and have fired as o's watermark
// requires, their accumulators) and schedules their timers; keys may come
// in any order. A key o already holds is refused; the empty form adds
// nothing. Corrupt input is reported through d as by Decode, and on error o
// is left as it was. The timer heap orders windows strictly (windowLess), so
// the order of the calls changes no firing. o keeps key: a restore passes
// the string it keeps for the key everywhere, not a slice of a buffer.
func (o *Operator) DecodeKey(d *codec.Decoder, key string) error {
	return o.DecodeKeyAt(d, key, o.wm)
}

// DecodeKeyAt is DecodeKey for a key's state as it was at watermark wm,
// below the operator's (a state kept elsewhere through a Raise, which
// RemoveKey's caller gives back late): the windows due between wm and the
// operator's watermark are overdue, for Drain and CatchUp to fire and drop
// as the Raise would have had them.
func (o *Operator) DecodeKeyAt(d *codec.Decoder, key string, wm int64) error {
	if err := d.Err(); err != nil {
		return err
	}
	if o.keys.get(key) != nil {
		d.Fail("key %q is restored twice", key)
		return d.Err()
	}
	wm = min(wm, o.wm)
	ks := o.decodeKey(d, key, wm, true)
	if err := d.Err(); err != nil {
		return err
	}
	if ks == nil {
		return nil
	}
	o.keys.add(ks)
	o.keysPeak = max(o.keysPeak, o.keys.len())
	for _, w := range ks.wins {
		o.timers.push(w)
		o.lagging = o.lagging || w.at <= o.wm
	}
	return nil
}

// decodeHeader reads the header, failing d unless it is of this format
// version and o's definition, and returns its watermark.
func (o *Operator) decodeHeader(d *codec.Decoder) (int64, error) {
	if v := d.Uvarint(); d.Err() == nil && v != stateVersion {
		d.Fail("window state version %d is not supported (this build reads version %d)", v, stateVersion)
	}
	o.decodeSpec(d)
	wm := d.Varint()
	return wm, d.Err()
}

// minWindowBytes is the fewest bytes a window takes, so that d.Count bounds
// the allocations by the input: start, length, fired and count take a byte
// each, and every aggregate but Count at least one more.
func (o *Operator) minWindowBytes() int {
	n := 4
	for _, k := range o.kinds {
		if k != Count {
			n++
		}
	}
	return n
}

// decodeKey reads the windows of key at watermark wm into a new key state,
// in neither o.keys nor the timer heap, and returns it. It returns nil when
// d fails, and for the empty form (no windows), which it refuses unless
// allowEmpty.
func (o *Operator) decodeKey(d *codec.Decoder, key string, wm int64, allowEmpty bool) *keyState {
	nWins := d.Count(o.minWindowBytes())
	if d.Err() != nil {
		return nil
	}
	if nWins == 0 {
		if !allowEmpty {
			d.Fail("key %q has no windows", key)
		}
		return nil
	}
	ks := o.allocKey(key)
	for j := range nWins {
		w := o.decodeWindow(d, ks, wm, j)
		if d.Err() != nil {
			return nil
		}
		ks.wins = append(ks.wins, w)
	}
	return ks
}

// replace installs a decoded state: watermark wm, keys, and timers, a
// valid heap of their windows, each window's idx set.
func (o *Operator) replace(wm int64, keys keyIndex, timers timerHeap) {
	o.wm = wm
	for ks := range o.keys.all() {
		ks.live = false // Keys holding them look the key up again
	}
	o.keys = keys
	o.keysPeak = keys.len() // memory accounting starts afresh, as after shrink
	o.timers = timers
	o.lagging = o.Overdue()
}

// decodeSpec fails d unless the state was written for o's spec and
// aggregate kinds. Kinds are compared as read, before any conversion, so
// that a corrupt kind cannot wrap around to a valid one.
func (o *Operator) decodeSpec(d *codec.Decoder) {
	kind := d.Uvarint()
	s := Spec{Size: d.Varint(), Slide: d.Varint(), Offset: d.Varint(), Gap: d.Varint(), AllowedLateness: d.Varint()}
	aggs := make([]uint64, d.Count(1))
	for i := range aggs {
		aggs[i] = d.Uvarint()
	}
	if d.Err() != nil {
		return
	}
	same := kind == uint64(o.spec.Kind) && len(aggs) == len(o.kinds)
	for i := 0; same && i < len(aggs); i++ {
		same = aggs[i] == uint64(o.kinds[i])
	}
	s.Kind = o.spec.Kind
	if !same || s != o.spec {
		names := make([]string, len(aggs))
		for i, k := range aggs {
			names[i] = kindName(k, func(u uint8) string { return AggKind(u).String() })
		}
		d.Fail("window state was written for %s, not for this definition's %s",
			describeDef(kindName(kind, func(u uint8) string { return Kind(u).String() }), s, names),
			describeDef(o.spec.Kind.String(), o.spec, fmt.Sprint(o.kinds)))
	}
}

// kindName names a kind read from the input, which may not fit in a uint8.
func kindName(k uint64, name func(uint8) string) string {
	if k > math.MaxUint8 {
		return fmt.Sprintf("kind %d", k)
	}
	return name(uint8(k))
}

// describeDef names a definition in error messages.
func describeDef(kind string, s Spec, aggs any) string {
	return fmt.Sprintf("%s window (size=%d slide=%d offset=%d gap=%d lateness=%d) with aggregates %v",
		kind, s.Size, s.Slide, s.Offset, s.Gap, s.AllowedLateness, aggs)
}

// decodeWindow reads the j-th window of ks and checks it against the
// previous one and the watermark wm. The result is valid only if d has no
// error.
func (o *Operator) decodeWindow(d *codec.Decoder, ks *keyState, wm int64, j int) *window {
	var start int64
	if j == 0 {
		start = d.Varint()
	} else {
		prev := ks.wins[j-1].start
		delta := d.Uvarint()
		// uint64(MaxInt64)-uint64(prev) is MaxInt64-prev computed mod 2^64,
		// and that difference is in [0, 2^64): it is exact.
		if delta > uint64(math.MaxInt64)-uint64(prev) {
			d.Fail("key %q: window start overflows", ks.key)
			return nil
		}
		start = int64(uint64(prev) + delta)
	}
	length := d.Uvarint()
	if d.Err() != nil {
		return nil
	}
	// Only a window at math.MaxInt64 is empty: an element there gets
	// [MaxInt64, MaxInt64) when its grid cell or session starts there and
	// its end saturates.
	if (length == 0 && start != math.MaxInt64) || length > uint64(math.MaxInt64)-uint64(start) {
		d.Fail("key %q: window at %d has length %d", ks.key, start, length)
		return nil
	}
	end := int64(uint64(start) + length)
	if !o.windowShape(start, end) {
		d.Fail("key %q: [%d,%d) is not a window of a %s", ks.key, start, end,
			describeDef(o.spec.Kind.String(), o.spec, fmt.Sprint(o.kinds)))
		return nil
	}
	if j > 0 {
		p := ks.wins[j-1]
		// drop and addFixed binary-search a key's windows, and addSession
		// takes the sessions that meet an element as a run: both need them
		// sorted, and sessions apart.
		if o.spec.Kind == Session && p.end >= start {
			d.Fail("key %q: session [%d,%d) meets session [%d,%d)", ks.key, start, end, p.start, p.end)
			return nil
		}
		if p.start == start && p.end >= end {
			d.Fail("key %q: window [%d,%d) does not follow window [%d,%d)", ks.key, start, end, p.start, p.end)
			return nil
		}
	}
	if o.cleanupTime(end) <= wm {
		d.Fail("key %q: window [%d,%d) outlived its cleanup time at watermark %d", ks.key, start, end, wm)
		return nil
	}

	w := o.newWindow(ks, start, end)
	w.fired = d.Bool()
	count := d.Uvarint()
	if d.Err() != nil {
		return nil
	}
	// Derived as settle and Advance leave it: a window is armed until the
	// watermark reaches its end-1, and it has fired by then.
	w.armed = end-1 > wm
	switch {
	case !w.armed && !w.fired:
		d.Fail("key %q: window [%d,%d) has not fired at watermark %d", ks.key, start, end, wm)
	case w.armed && w.fired && o.spec.Kind != Session:
		// Only a session fires early: it can merge a fired session and grow
		// past the watermark.
		d.Fail("key %q: window [%d,%d) fired before watermark %d reached it", ks.key, start, end, wm)
	case count == 0 || count > math.MaxInt64:
		d.Fail("key %q: window [%d,%d) has %d elements", ks.key, start, end, count)
	}
	if d.Err() != nil {
		return nil
	}
	w.count = int64(count)
	if w.armed {
		w.at = end - 1
	} else {
		w.at = o.cleanupTime(end)
	}
	for i, k := range o.kinds {
		switch k {
		case Count:
		case CountDistinct:
			w.accs[i].set = decodeDistinct(d, count)
		default:
			a := &w.accs[i]
			n := d.Uvarint()
			if d.Err() == nil && n > count {
				d.Fail("key %q: window [%d,%d) has %d %s arguments among %d elements", ks.key, start, end, n, k, count)
			}
			a.n = int64(n)
			if n > 0 {
				a.f = d.Float64()
			}
		}
		if d.Err() != nil {
			return nil
		}
	}
	return w
}

// windowShape reports whether [start, end) (start <= end) is a window that
// o's assigner can produce: a cell of the tumbling or sliding grid, with
// bounds saturated as Add saturates them, or a session at least a gap long.
func (o *Operator) windowShape(start, end int64) bool {
	s := o.spec
	slide := s.Slide
	switch s.Kind {
	case Session:
		// A session ends a gap after its last element, unless that
		// saturated, and starts at its first.
		return end == math.MaxInt64 || uint64(end)-uint64(start) >= uint64(s.Gap)
	case Tumbling:
		slide = s.Size
	}
	if alignRem(start, s.Offset, slide) == 0 && end == satAdd(start, s.Size) {
		return true
	}
	// A cell that starts below math.MinInt64: its start saturated, its end
	// end-size is on the grid, that is end ≡ offset+size (mod slide).
	return start == math.MinInt64 && end < math.MinInt64+s.Size &&
		alignRem(end, s.Offset, slide) == s.Size%slide
}

// decodeDistinct reads a distinct set of a window with count elements. Only
// values that distinctKey produces, in strictly increasing canonical order,
// are accepted: another form of a value (an integral float, a small uint64)
// or a repeat would make the set count a value twice or re-encode
// differently.
func decodeDistinct(d *codec.Decoder, count uint64) map[any]struct{} {
	n := d.Count(1)
	if d.Err() != nil || n == 0 {
		return nil
	}
	if uint64(n) > count {
		d.Fail("distinct set of %d values among %d elements", n, count)
		return nil
	}
	set := make(map[any]struct{}, n)
	var prev any
	for i := range n {
		var v any
		switch tag := d.Uvarint(); tag {
		case distinctNaN:
			v = nanKey{}
		case distinctFalse:
			v = false
		case distinctTrue:
			v = true
		case distinctInt:
			v = d.Varint()
		case distinctUint:
			u := d.Uvarint()
			if u <= math.MaxInt64 {
				d.Fail("distinct value %d should be an int64", u)
			}
			v = u
		case distinctFloat:
			f := d.Float64()
			if _, ok := floatKey(f).(float64); !ok {
				d.Fail("distinct value %v should not be a float64", f)
			}
			v = f
		case distinctString:
			v = d.String()
		default:
			d.Fail("unknown distinct value tag %d", tag)
		}
		if d.Err() != nil {
			return nil
		}
		if i > 0 && compareDistinct(prev, v) >= 0 {
			d.Fail("distinct value %v does not follow %v", v, prev)
			return nil
		}
		set[v] = struct{}{}
		prev = v
	}
	return set
}
