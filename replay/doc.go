// Package replay runs a ruleset over NDJSON input, the bounded case of
// streaming (docs/design.md "Replay input"): Run, behind `vigil replay`, and
// Backtest, which compares two rulesets' decisions over the same input. It
// drives engine Tasks the way the service does, one per input partition, and
// feeds them through Task.Process only; what a task does with a record is
// package engine's.
//
// Goroutines. Run starts these, and has waited for all of them when it
// returns:
//   - a reader, which splits the input into batches of whole lines
//     (readBatches) and hands each on twice, in input order: to the decode
//     workers and to Run's goroutine;
//   - Config.Decoders decode workers, each with its own engine.Extractor,
//     which parse a batch's lines into records, decoding each value straight
//     into slots from the batch's engine.Slab, and extract them;
//   - one goroutine per input partition, which owns that partition's Task and
//     processes the jobs it is handed, in batch order (taskSet);
//   - short-lived ones that recycle merged batches, and at the end of input
//     finish the tasks in parallel.
//
// Run's own goroutine drives the rest: it waits for each batch's decoding in
// order, enriches it (engine.Enricher), hands its records to their
// partitions' tasks with their processing time (Record.Arrival), and merges
// and writes the outputs. Data passes by hand-off only: a batch is its
// decoder's until it closes the batch's done channel, then Run's goroutine's;
// a task's share of it (a job) is the task goroutine's until it is handed
// back; a control record that goes to every task is only read by them. The
// one lock, taskSet.guardMu, guards the tasks' rule guards, which a cancel
// stops from the context's own goroutine.
//
// Invariants: the output depends only on the input and the ruleset, so the
// same input gives the same bytes, whatever the number of decoders and the
// tasks' pace: outputs are merged by input line, then partition, and at the
// end of input partition by partition. Every non-blank line is counted once:
// a record processed, a duplicate or in the DLQ with its reason, or a control
// line that raises watermarks. Every queue is bounded (2×Decoders batches
// read ahead, pipelineDepth dispatched and not merged), so memory follows
// the batch size, not the input's.
//
// Each task registers its inputs, partition p of every input stream, as it
// starts (Task.ExpectInput), as a Kafka task does: an input that has not
// sent its first record yet holds the task's watermark back, as in the
// service (docs/design.md "Watermarks"), until it delivers or goes idle.
//
// Processing time (replayClock) is the record timestamps that lines may
// carry (the Kafka record time: a backtest over topic data has them), global
// as a machine's clock is: each record arrives at the largest timestamp seen
// up to its line (engine.ArrivalTime). It measures idleness, as the wall
// clock does in the service; max_future_skew holds each event to its own
// record's timestamp, and is off for a line without one. Event time is not
// processing time: the largest event time seen made a quiet hour in the data
// look like a clock fault (the next event went to the DLQ), and made an input
// whose records merely come later in the file idle, so that decide: watermark
// decided without it and two arrival orders of the same events decided
// differently.
//
// So a replay whose lines carry no timestamps has no processing time, and
// none of its inputs goes idle: each holds its task's watermark until it
// delivers, a control line raises it, or the input ends (the maximum
// watermark, where everything fires anyway). Watermark decisions, windows
// and patterns are then functions of each stream's own order alone. The
// price is paid by a stream that the ruleset declares and the input lacks: it
// holds the watermark of its tasks at the start to the end of the input
// (windows fire, histories expire and watermark decisions are made only
// there), as a Kafka topic that never delivers would hold the service's
// without idle_after. A control line {"watermark": T, "stream": S} raises
// it, or timestamps on the lines let it go idle.
package replay
