// Package asyncio is Vigil's async enrichment operator (Flink's Async I/O):
// it runs a lookup (Redis, HTTP or any Lookup) per element of a stream, with
// a timeout covering retries, a capacity bound, an optional LRU cache and a
// fallback value, and hands the results back in input order (Ordered) or as
// they complete (unordered) without ever letting an element cross a
// watermark. It knows nothing about expressions: the caller computes the
// lookup key of each element.
//
// # Goroutines
//
// New starts Workers worker goroutines and one emitter; Close stops them
// (closing the quit channel and cancelling every running lookup's context),
// waits for all of them and then closes Results. Nothing else starts a
// goroutine. The caller owns two roles:
//
//   - the feeder: one goroutine calls Submit, SubmitWatermark and Drain, in
//     input order;
//   - the reader: one goroutine drains Results, concurrently with the feeder.
//
// Workers take elements from a channel bounded by Capacity, run the lookup
// under a context whose deadline is the element's (the earliest of a batch),
// retry with backoff, and mark the element complete under Operator.mu. The
// emitter is the only sender on Results: it pops what may be emitted under
// Operator.mu and sends it outside the lock. Cache and breaker have their own
// locks, never held while taking Operator.mu or the other way round.
//
// # Invariants
//
//   - Capacity: an element holds a slot from Submit until the reader has
//     received its output, so at most Capacity elements are in flight or
//     buffered, and at most Capacity lookups run at once; a full operator
//     blocks Submit (backpressure). Watermarks take no slot: one directly
//     behind another not yet emitted replaces it with the larger value, so
//     the buffer stays bounded whatever the watermark rate.
//   - Exactly once: every accepted element comes out once, with the lookup's
//     value or with a copy of Fallback plus "_error" (and Output.Err set).
//   - Deadline: an element completes no later than about Timeout after
//     Submit accepted it, provided the Lookup honours ctx: every attempt runs
//     under the element's deadline and a retry starts only if its backoff
//     ends before it.
//   - Ordered: outputs, watermarks included, leave in exactly the input
//     order.
//   - Unordered: elements between two watermarks leave in completion order;
//     an element submitted after a watermark leaves after it, and a
//     watermark leaves only after every element submitted before it.
//
// # Drain
//
// Drain returns once everything submitted before it (elements and
// watermarks) has been handed to the reader: each element has a result or
// its fallback, no lookup of it runs any more, and Stats().InFlight is 0. It
// is the checkpoint hook: the feeder stops, drains, and the task snapshots
// its state with nothing in flight (Flink instead stores in-flight inputs in
// the checkpoint and re-runs them on restore).
package asyncio
