// Package engine runs a compiled ruleset over records: the Task, one per
// input partition (docs/design.md "Architecture"). Drivers feed it: the
// Kafka service (package kafka) and replay (package replay), each through
// Task.Process and the Task's other whole operations (decide, advance,
// snapshot, restore).
//
// A record goes through two halves. The Extractor, stateless, decodes the
// value and evaluates the stream's key, time and id, and prepares what history
// keeps of it; any goroutine can run it ahead of the task. The Task owns all
// keyed state of its partition: idempotency ids, per-key history, window,
// join and pattern operators, and the watermarks. For each record it
// deduplicates, keeps history, updates windows, feeds joins and patterns
// (whose pairs and matches are events of derived streams, processed at once
// the same way), decides (rules), then moves the watermark: patterns flush
// their event-time buffers first, then windows fire and state expires. While
// it processes a record it loads the state of the next few (its lookahead), a
// trick it keeps to itself.
//
// Ownership: a Task is not safe for concurrent use; exactly one goroutine
// feeds it and receives its outputs, in processing order, through its emit
// function. An Extractor, likewise, belongs to one goroutine; an Enricher to
// the goroutine that drives it, with one reader goroutine per enrichment
// that Close stops.
//
// Invariants: every input record is counted once (processed, a duplicate, or
// DLQ with its reason); outputs depend only on the input and the ruleset, so a
// replay gives the same bytes every time; state is bounded by retention, the
// per-key history cap and the window lifetimes.
package engine
