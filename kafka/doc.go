// Package kafka is Vigil's runtime over Kafka (docs/design.md
// "Architecture", "Delivery", "Exactly-once"): the consumer-group tasks that run the engine,
// the outputs they write, the checkpoint store, the ruleset log, backtests
// over the input topics, the requests of the decision API, and the embedded
// broker.
//
// # Goroutines, and what each owns
//
// Run's goroutine polls: it owns the consumer (kgo.Client's PollRecords,
// PauseFetchPartitions, ResumeFetchPartitions) and the batches it holds for a
// task whose queue is full. It hands each fetched batch to its task's queue
// (task.in) and never touches a task's engine.
//
// Each task (partition p of every input topic) has one goroutine, task.run,
// which alone touches its engine.Task, its enrichments, its input offsets
// and its checkpoint sequence. Everything else reaches the task through it:
// batches through task.in; API requests (Decide, Decision, Entity) as
// closures through task.calls, run between two batches; a ruleset switch
// through switchRS, applied between two batches. A request therefore sees the
// task's state between events, never in the middle of one.
//
// franz-go's callbacks run on its own goroutines:
//   - produce promises (task.acked, the decision API's acks) touch only
//     atomics (decNext, decGen, produceErr) and WaitGroups (inflight of the
//     record's generation, a request's acks);
//   - group callbacks (assign, revoke) start and stop tasks under Service.mu,
//     which guards the task map and the running ruleset and is never held
//     while waiting on a task.
//
// A checkpoint (checkpoint.go) is cut on the task's goroutine, which also
// encodes the cut's records in slices between batches (stepCut, through
// task.stepSig); the cut switches the output generation (task.gen). Once the
// records are encoded, a goroutine of the checkpoint waits for the
// generation before the cut to be acknowledged, saves, and merges the chain
// into a base when it is due, holding task.saving from the cut to the end of
// the save; the next checkpoint takes it (tryLock: a checkpoint due while
// one is being cut or saved is skipped) and the final checkpoint waits for
// it, no longer than ShutdownTimeout (a broker that stopped answering would
// hold the save for ever). That goroutine alone touches task.ckpt
// meanwhile. Under exactly-once (txn.go) it also commits the generation's
// transaction and opens the generation's next one, replacing task.outcomes
// of that generation: the task's goroutine reads only its current
// generation's, and switches generation only at a cut, after task.saving
// was released.
//
// The side goroutines Run starts — the ruleset watcher (watchRules), the
// owners map (watchOwners), the rule watchdog and its quarantiner (guard.go)
// — reach tasks only through switchTo, the guard marks (atomics), and
// Service.mu. All have returned when Run returns: first the poll loop ends,
// then the watchers, then every task drains, takes its final checkpoint and
// commits (stopTasks, in parallel, within ShutdownTimeout), then the client
// leaves the group.
//
// Lock order: Service.mu before nothing else; task.saving is never taken
// under Service.mu.
package kafka
