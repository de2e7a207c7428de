// Package workload generates the synthetic fraud workload behind `vigil gen`:
// NDJSON in Vigil's replay input format (docs/design.md "Replay input"),
// one record a line,
//
//	{"stream":"transactions","value":{"tx_id":"t0000001","user_id":"u000042",...}}
//
// over three streams (transactions, logins, devices), with planted fraud cases
// that the example ruleset (examples/fraud.yaml) must flag.
//
// The same workload comes in three other shapes, record for record: Records
// hands each record to a function (stream, user_id key, value, ts),
// GenerateKcat writes one stream's records as kcat's key<TAB>value lines
// (`vigil gen --kafka`), and Produce, the live producer that `vigil gen
// --brokers` runs, sends them to Kafka topics named after the streams, paced
// on the workload's clock. WriteTruthFile writes the planted cases
// (`vigil gen --truth`).
//
// Invariants:
//
//   - Deterministic: the output is a pure function of the Config. All randomness
//     comes from one PCG seeded from Config.Seed, drawn in a fixed order; a user's
//     stable traits (home country, IPs, devices, cards, spending level) are hashed
//     from the seed and the user's index, so no per-user table is kept. Nothing
//     reads the clock or iterates a map.
//   - Exactly Config.Events lines are written.
//   - Every event is generated in event-time order; an event chosen to be late is
//     held back and written at most MaxDelay ms of event time after its own time.
//     Hence no line's time is more than MaxDelay behind the largest time written
//     before it on its stream (on its partition, and on the whole output).
//   - A duplicate is a byte-identical copy of an earlier transaction line (same
//     tx_id, same value), written at most MaxDelay ms of event time after the
//     transaction's time.
//   - Planted fraud events are never late and never duplicated, so a ruleset that
//     decides transactions on arrival sees each planted case whole, in order.
//
// Generate is not safe to call concurrently on the same io.Writer; separate calls
// share no state. Generation runs on the caller's goroutine (Records calls its
// function there too). Produce alone starts goroutines, the franz-go client's
// and one for progress lines, and has stopped them all when it returns; the
// client's acknowledgement callbacks and the progress goroutine share only
// atomic counters and a mutex-guarded list of errors with the sender, so the
// send path takes no lock.
package workload
