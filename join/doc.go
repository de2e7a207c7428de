// Package join is the keyed event-time interval join operator of Vigil
// (docs/design.md "Interval joins"; Flink's IntervalJoinOperator). Time is int64
// milliseconds. The package knows nothing about expressions or JSON: the
// caller compiles the join's condition into a Condition and treats
// Element.Value as it likes.
//
// # Ownership
//
// An Operator holds both sides of one join for all keys of one task and is
// owned by the task's goroutine: no method is safe for concurrent use. The
// emit callback and the Condition run synchronously on that goroutine and
// must not call back into the Operator. An Element given to Add belongs to
// the Operator until it is dropped; Pairs point at buffered Elements, which
// the caller must not change. Keys are copied when they enter the state, so
// the Operator never pins the record a key came from.
//
// # Matching
//
// With Lower' = Lower+1 if LowerExclusive else Lower, and Upper' = Upper-1
// if UpperExclusive else Upper (Flink's shift; times are whole
// milliseconds), a left element l and a right element r of the same key
// join when
//
//	l.Time + Lower' <= r.Time <= l.Time + Upper'
//
// and the Condition holds (inner join). The Pair's Time is
// max(l.Time, r.Time). The comparison is exact over the integers: range
// ends that leave the int64 range saturate at math.MinInt64 and
// math.MaxInt64, and a range that lies wholly outside it is empty.
//
// # Emission order
//
// Pairs are emitted eagerly from Add, never from Advance: an arriving
// element is probed against the other side's buffer of its key, a binary
// search over [t+Lower', t+Upper'] (left probing right) or
// [t-Upper', t-Lower'] (right probing left), and its pairs come out in the
// other side's (Time, Seq) order. Across calls, pairs come out in arrival
// order of the later element of each pair, so every pair is emitted exactly
// once, by the Add of whichever of its two elements arrived second.
//
// # Lateness and cleanup
//
// The Operator's watermark is the largest one it has been given, by Add or
// Advance (a stale watermark changes nothing); only Advance drops elements.
//
//   - An element with Time < wm is late (Flink's isLate, strict): Add
//     returns false, buffers nothing and emits nothing. Time == wm is not
//     late.
//   - A left element l is kept while wm <= l.Time + Upper' and dropped by
//     the first Advance to a watermark above it; a right element r is kept
//     while wm <= r.Time - Lower'. These are exact: a future element is not
//     late only if its time is >= wm, and l can still join a future r >= wm
//     exactly while r <= l.Time + Upper' is possible. An element that is
//     not late but already beyond that point on arrival emits its pairs and
//     is not buffered at all.
//   - A key whose two buffers are empty is forgotten.
//
// Flink keeps elements one millisecond less. Its cleanup timer for a left
// element fires when the watermark reaches l.Time + Upper' (for
// Upper' > 0; at l.Time otherwise), but a right element at exactly that
// watermark is not late and is in range, so Flink can lose that pair. Case,
// with the documentation's between(-2ms, +1ms): orange (left) at 5 is
// buffered; the watermark reaches 6 and Flink's timer removes orange@5;
// then green (right) at 6 arrives, is not late (6 is not < 6) and is in
// range (5-2 <= 6 <= 5+1), yet Flink emits nothing. Vigil keeps orange@5
// until the watermark passes 6 (wm >= 7) and emits (5, 6) at time 6.
// Symmetrically green@5 is kept until wm > 7 where Flink drops it at 7.
// Where Upper' < 0 (or Lower' > 0) Flink keeps elements longer than
// needed; Vigil drops them as soon as no pair is possible.
//
// # Memory
//
// State is bounded by the elements within the bounds' reach of the
// watermark: after Advance(wm) the Operator holds exactly the non-late
// elements with l.Time + Upper' >= wm (left) or r.Time - Lower' >= wm
// (right). Each key side is a slice sorted by (Time, Seq); since an
// element's last useful watermark grows with its time, Advance drops a
// prefix, and the slice is compacted once the dropped prefix is half of it.
// Each non-empty key side has one entry in a min-heap ordered by the last
// useful watermark of its first element, so Advance costs O(log n) per key
// side it drops from plus O(1) per dropped element, and nothing per idle
// key. In-order arrivals append; an out-of-order one is inserted by binary
// search. The key map and the heap are reallocated when they fall below a
// quarter of their peak.
package join
