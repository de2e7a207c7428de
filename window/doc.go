// Package window is the keyed event-time window operator of Vigil, with its
// tumbling, sliding and session assigners (docs/design.md "Windows"; Flink's
// WindowOperator with EventTimeTrigger and allowed lateness). Time is int64
// milliseconds. The package knows nothing about expressions or JSON: the
// caller evaluates the aggregate arguments and passes their values.
//
// # Ownership
//
// An Operator holds the state of one window definition for all keys of one
// task and is owned by the task's goroutine: no method is safe for
// concurrent use, and emit callbacks run synchronously on that goroutine and
// must not call back into the Operator.
//
// # Assignment
//
//   - Tumbling(size, offset): start = t - ((t - offset) mod size) with a
//     non-negative mod; the window is [start, start+size).
//   - Sliding(size, slide, offset): every window [start, start+size) with
//     start on the slide grid (shifted by offset) that contains t, that is
//     ceil(size/slide) or floor(size/slide) windows.
//   - Session(gap): [t, t+gap), merged with every session of the key that it
//     overlaps or touches (a.start <= b.end && a.end >= b.start), which can
//     join several sessions into one. Sessions of a key are always disjoint
//     and never touch. A merged session adds up the counts, sums and
//     extremes and unites the distinct sets of its parts.
//
// Window bounds that would leave the int64 range saturate at
// math.MinInt64 and math.MaxInt64, and so do cleanup times.
//
// # Firing and lateness
//
// With L the allowed lateness and wm the watermark (it never goes back; Add
// first advances to the watermark it is given, as Advance does):
//
//   - A window fires once when wm reaches end-1 (Advance), in the order
//     (end-1, key, start) across all keys. Raise moves wm without firing,
//     and Drain and CatchUp fire what is then overdue, in that order for
//     each key; the order across keys may differ (docs/design.md "Firing in
//     slices").
//   - Its state lives until wm reaches end-1+L; then it is dropped (after
//     firing, when both happen at the same watermark). With L = 0 a window
//     fires and is dropped at the same watermark.
//   - An element is accepted by every window of it whose end-1+L > wm. A
//     window with end-1 <= wm that accepts an element fires at once from Add;
//     Result.Update says whether it had fired before. A session that merges
//     a fired session carries Update on every later firing.
//   - An element accepted by no window is late: Add returns false and the
//     caller writes it to the late side output. Flink side-outputs an element
//     that no window accepted only if also t+L <= wm; that always holds here
//     (every window of an element has end-1 >= t, and slide <= size leaves
//     no element without a window), so no element is dropped silently.
//     An element whose own session would be late is accepted when it
//     merges into a live session.
//
// # Memory
//
// State is bounded by the live windows: a window is dropped at its cleanup
// time, a key goes with its last window, and the key index and the timer heap
// are reallocated when they fall below a quarter of their peak. Every live
// window has one entry in a timer min-heap, so Advance costs O(log n) per
// fired or dropped window and nothing per idle key, and Add on an existing
// tumbling window touches no heap entry. Advance(math.MaxInt64) fires and
// drops everything. Keys and distinct string values are copied when they
// enter the state, so a window never pins the record they came from, and
// Add keeps no reference to its args.
package window
