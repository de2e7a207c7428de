package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/asyncio"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/state"
	"github.com/vigil-cep/vigil/stream"
	"github.com/vigil-cep/vigil/telemetry"
)

// batch is one fetch's records of one input partition.
type batch struct {
	topic   string
	records []*kgo.Record
}

// task is partition p of every input topic: one goroutine runs an engine
// Task over its records, writes the outputs, and checkpoints.
type task struct {
	s       *Service
	part    int32
	rs      *rules.Ruleset // the version eng runs
	byTopic map[string]int // input topic -> stream index under rs
	eng     *engine.Task
	in      chan *batch
	quit    chan struct{} // closed by stop
	done    chan struct{} // closed when the goroutine has returned
	err     error         // why the goroutine stopped, read after done

	next     map[string]int64 // input topic -> next offset to process
	decNext  atomic.Int64     // next offset of our decisions partition, from acks
	restored bool
	lastCkpt time.Time
	ckpt     ckptState     // the checkpoint chain and the cut in progress (checkpoint.go)
	cutCost  time.Duration // how long the last cut took, from the cut to its last record encoded (checkpointDue)
	stepSig  chan struct{}
	// nextSlice is when stepCut may start its next slice, and sliceTimer
	// asks for it then (pace.go).
	nextSlice  time.Time
	sliceTimer *time.Timer
	cool       cooling // freezing idle keys (cool.go)
	thawErr    error   // the last engine.Task.ThawError logged

	switchRS  atomic.Pointer[rules.Ruleset] // a version to switch to before the next event
	switchSig chan struct{}
	calls     chan func() // API requests, run on the task's goroutine between events
	own       ownEvents   // the events Decide wrote, not to be processed again when fetched back
	// work counts the decisions asked of the API since the start (reads
	// change nothing), and checkpointed is what the last checkpoint saw of
	// it and of the state: an idle task skips its periodic checkpoint
	// (checkpoint).
	work         taskWork
	checkpointed *taskWork
	batch        []engine.Record // the records being processed, for the arrival time of their outputs (observe)
	lastGauges   time.Time
	reported     map[string]int64              // the values reportGauges last sent
	watermark    atomic.Int64                  // the engine's, for the metrics goroutine
	guard        rules.Guard                   // the rule evaluations, for the watchdog (guard.go)
	running      atomic.Pointer[rules.Ruleset] // rs, for the watchdog

	// Outputs are produced in generations, one per checkpoint: gen is the
	// current one (the task's goroutine switches it at a cut), inflight
	// counts each generation's records not yet acknowledged, decGen the
	// next offset of our decisions partition after each generation's
	// acknowledged decisions, and ackFn is each generation's callback
	// (t.acked, then the record back to outRecords). A checkpoint's save
	// waits for the generation before its cut only.
	gen      int
	inflight [2]sync.WaitGroup
	decGen   [2]atomic.Int64
	ackFn    [2]func(*kgo.Record, error)
	saving   saveLock // held from a cut until its checkpoint is saved
	// Under exactly-once (txn.go), each generation's transactional
	// producer, and how its open transaction ends; nil under
	// at-least-once.
	txn        [2]*kgo.Client
	outcomes   [2]*txnOutcome
	produceErr atomic.Pointer[error]
	headers    [engine.KindCount][]kgo.RecordHeader
	recs       []engine.Record  // the batch being processed, reused
	ptrs       []*engine.Record // pointers to recs, reused
	enr        *engine.Enricher // the ruleset's enrichments; nil without any
	clock      batchClock       // the engine's processing time
}

// Checkpoint names: sections and offsets of a task's snapshot.
const (
	sectionEngine  = "engine"
	sectionRuleset = "ruleset"
	inPrefix       = "in/"
	outPrefix      = "out/"
)

// loadTask builds task p and reads its latest checkpoint chain (nil when it
// has none), fencing the task's previous owner first under exactly-once. A
// task loaded is started with launch; the tasks of an assignment are loaded
// first, all of them, then launched (Service.assign says why).
func (s *Service) loadTask(ctx context.Context, p int32) (*task, []*state.Snapshot, error) {
	t := &task{s: s, part: p, in: make(chan *batch, s.cfg.QueueBatches), quit: make(chan struct{}),
		done: make(chan struct{}), next: make(map[string]int64), switchSig: make(chan struct{}, 1),
		calls: make(chan func(), s.cfg.APIQueue), stepSig: make(chan struct{}, 1),
		saving: make(saveLock, 1)}
	t.guard.Watch() // the watchdog reads its marks (guard.go)
	t.sliceTimer = time.AfterFunc(time.Hour, t.signalStep)
	t.sliceTimer.Stop()
	for g := range t.ackFn {
		t.ackFn[g] = func(r *kgo.Record, err error) {
			t.acked(r, g, err)
			outRecords.Put(r)
		}
	}
	if err := t.use(s.Ruleset(), nil); err != nil {
		return nil, nil, err
	}
	t.watermark.Store(stream.MinTime)
	chain, err := t.readChain(ctx)
	if err != nil {
		t.release()
		return nil, nil, err
	}
	return t, chain, nil
}

// launch restores chain (when not nil) into a task loadTask built, re-reads
// the decisions it emitted after that checkpoint (so replayed transactions
// get the recorded decision, docs/design.md "Delivery"), and starts its
// goroutine. A task that fails to launch is closed.
func (t *task) launch(ctx context.Context, chain []*state.Snapshot) error {
	if err := t.start(ctx, chain); err != nil {
		t.release()
		return err
	}
	// Stagger the tasks' checkpoints over the interval: tasks that all cut
	// at once would encode and write at the same time.
	n := max(t.s.counts[InputTopics(t.rs)[0]], 1)
	t.lastCkpt = time.Now().Add(-t.s.cfg.CheckpointInterval * time.Duration(t.part%n) / time.Duration(n))
	go t.run()
	return nil
}

// tickEvery is the period of the task's tick.
func (t *task) tickEvery() time.Duration {
	return min(100*time.Millisecond, t.s.cfg.CheckpointInterval)
}

// readChain fences the task's previous owner (exactly-once) and reads the
// task's checkpoint chain: nil when it has none.
func (t *task) readChain(ctx context.Context) ([]*state.Snapshot, error) {
	if t.s.cfg.Delivery == ExactlyOnce {
		if err := t.openTxns(ctx); err != nil {
			return nil, err
		}
	}
	chain, err := t.s.ckpt.Chain(ctx, t.part)
	if errors.Is(err, state.ErrNoSnapshot) {
		return nil, nil
	}
	return chain, err
}

// start restores chain (when not nil) and recalls the decisions emitted
// after it (at-least-once).
func (t *task) start(ctx context.Context, chain []*state.Snapshot) error {
	if chain != nil {
		if err := t.restore(chain); err != nil {
			return fmt.Errorf("restore checkpoint %d: %w", chain[len(chain)-1].Seq, err)
		}
	}
	if t.s.cfg.Delivery == ExactlyOnce {
		// What the task emitted after its checkpoint was in transactions
		// that did not commit: no consumer saw it, and there is nothing to
		// emit again as it was.
		return nil
	}
	return t.recall(ctx)
}

// use makes the task run rs, carrying over the state of data (a snapshot)
// when it is not nil.
func (t *task) use(rs *rules.Ruleset, data []byte) error {
	t.clock.read() // inputs registered now start their idleness timers now
	eng, err := engine.NewTask(rs, t.emit, engine.ProcessingClock(&t.clock), engine.SharedIDs(t.s.ids, t.part),
		engine.Guarded(&t.guard, t.s.quarantine))
	if err != nil {
		return err
	}
	var enr *engine.Enricher
	if len(rs.Enrichments) > 0 {
		if enr, err = engine.NewEnricher(rs, t.s.cfg.Lookups); err != nil {
			return err
		}
	}
	// Last, since it cannot be undone: a restore that succeeds takes over
	// the ids the running task holds in the instance's IDIndex (one that
	// fails has taken none).
	if data != nil {
		if err := eng.Restore(data); err != nil {
			if enr != nil {
				enr.Close()
			}
			return err
		}
	}
	if t.enr != nil {
		t.enr.Close()
	}
	t.rs, t.eng, t.enr = rs, eng, enr
	t.cool = cooling{start: time.Now()} // the epochs were the last task's
	t.running.Store(rs)
	t.byTopic = make(map[string]int)
	for _, st := range rs.Streams {
		if st.Input() {
			t.byTopic[st.Topic] = st.Index
			eng.ExpectInput(st.Index, t.part)
		}
	}
	eng.Track()       // checkpoints hold what changed since this state (checkpoint.go)
	eng.SliceFiring() // an hour's end fires between requests (stepCut)
	for k := range engine.KindCount {
		t.headers[k] = []kgo.RecordHeader{{Key: "kind", Value: []byte(k.String())},
			{Key: "ruleset", Value: []byte(rs.Version)}}
	}
	return nil
}

// switchTo asks the task to run rs from its next event on. Any goroutine may
// call it; the latest request wins.
func (t *task) switchTo(rs *rules.Ruleset) {
	t.switchRS.Store(rs)
	select {
	case t.switchSig <- struct{}{}:
	default:
	}
}

// applySwitch moves the task's state to the requested version, on the task's
// goroutine, between two events: a snapshot under the old version restored
// under the new one (operators keep their state by name; see
// engine.Task.Snapshot). If that fails the task stays on its version.
func (t *task) applySwitch() {
	rs := t.switchRS.Swap(nil)
	if rs == nil || rs.Version == t.rs.Version {
		return
	}
	t.finishCut() // the cut in progress is of the old version's state
	old := t.eng
	data, err := t.eng.Snapshot()
	if err == nil {
		err = t.use(rs, data)
	}
	if err == nil {
		old.Close() // after the new task took over its ids: releases only those of streams gone
	}
	if err != nil {
		t.s.log.Error("task stays on its ruleset version", "task", t.part, "version", t.rs.Version, "refused", rs.Version, "err", err)
	}
}

// restore loads a checkpoint chain (base first) into the task: the engine
// state merged from every element, the offsets of the last.
func (t *task) restore(chain []*state.Snapshot) error {
	data := make([][]byte, len(chain))
	for i, s := range chain {
		data[i] = s.Sections[sectionEngine]
	}
	if err := t.eng.RestoreChain(data); err != nil {
		return err
	}
	tip := chain[len(chain)-1]
	for name, off := range tip.Offsets {
		if topic, ok := cutPrefix(name, inPrefix); ok {
			t.next[topic] = off
		}
	}
	dec := tip.Offsets[outPrefix+t.s.cfg.Topics.Decisions]
	t.decNext.Store(dec)
	t.ckpt = ckptState{seq: tip.Seq, chain: len(chain), decisions: dec}
	t.restored = true
	return nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// recall reads our decisions partition from the checkpoint's output offset
// to its end and hands each decision to the engine, which re-emits it
// instead of deciding again when its transaction is replayed. It reads what
// is committed, to the last stable offset: the partition holds transactions
// and their markers when the group ran exactly-once before, and a marker
// may be its last record.
func (t *task) recall(ctx context.Context) error {
	topic := t.s.cfg.Topics.Decisions
	part := t.part % t.s.counts[topic]
	end, err := stableOffset(ctx, t.s.adm, topic, part)
	if err != nil {
		return err
	}
	from := t.decNext.Load()
	if from >= end {
		t.decNext.Store(end)
		return nil
	}
	cl, err := t.s.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n := 0
	for pos := from; pos < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading back decisions %s/%d from %d to %d (at %d): %w", topic, part, from, end, pos, err)
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("reading back decisions %s/%d: %w", topic, part, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = r.Offset + 1
			if r.Offset < end && !r.Attrs.IsControl() && t.eng.Recall(r.Value) {
				n++
			}
		})
	}
	t.decNext.Store(end)
	t.s.log.Info("recalled decisions emitted after the checkpoint", "task", t.part, "decisions", n,
		"from", from, "to", end)
	return nil
}

func (t *task) run() {
	defer close(t.done)
	defer t.sliceTimer.Stop()
	// The tick measures idleness and starts checkpoints; under
	// exactly-once a checkpoint is also when outputs become visible.
	tick := time.NewTicker(t.tickEvery())
	defer tick.Stop()
	for {
		select {
		case <-t.switchSig:
			t.applySwitch()
		case call := <-t.calls:
			t.clock.read()
			call()
			t.drainLater()
		case b := <-t.in:
			t.clock.read()
			t.process(b)
			t.drainLater()
		case <-t.stepSig:
			t.stepCut()
		case <-tick.C:
			t.clock.read()
			t.eng.Tick() // idleness is measured on the wall clock
			t.drainLater()
			t.watermark.Store(t.eng.Watermark())
			if time.Since(t.lastGauges) >= gaugeEvery {
				t.reportGauges()
			}
			if t.checkpointDue() {
				if err := t.checkpoint(context.Background(), true); err != nil {
					t.err = err
					t.s.failWith(fmt.Errorf("task %d: %w", t.part, err))
					return
				}
			}
			t.startCool()
		case <-t.quit:
			t.runQueuedCalls()
			return
		}
	}
}

// drainLater asks the loop for slices while windows an advance left are
// due (engine.Task.SliceFiring): requests and batches go between them.
func (t *task) drainLater() {
	if t.eng.Overdue() {
		t.signalStep()
	}
}

// runQueuedCalls answers the requests queued when the task is told to stop:
// their decisions go into its final checkpoint, rather than the requests
// failing (await). Requests that come later find no task (local).
func (t *task) runQueuedCalls() {
	for {
		select {
		case call := <-t.calls:
			t.clock.read()
			call()
		default:
			return
		}
	}
}

func (t *task) process(b *batch) {
	max := t.s.cfg.MaxRecordBytes
	stream, ok := t.byTopic[b.topic]
	if !ok {
		stream = -1 // a topic the running version no longer reads: to the DLQ
	}
	m := t.s.cfg.Metrics
	m.RecordsIn(b.topic, int64(len(b.records)))
	defer func() { t.watermark.Store(t.eng.Watermark()) }()
	recs := t.recs[:0]
	last := int64(-1) // the offset of the last record taken or skipped as our own
	for _, r := range b.records {
		if next, ok := t.next[b.topic]; ok && r.Offset < next {
			continue // before the checkpoint: a fetch that started earlier
		}
		last = r.Offset
		api := fromAPI(r)
		if api && t.own.take(b.topic, r.Offset) {
			continue // decided already (Decide): see ownEvents
		}
		rec := engine.Record{Stream: stream, StreamName: b.topic, Topic: b.topic, Partition: r.Partition,
			Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), HasTimestamp: true,
			Value: string(r.Value), Quiet: api}
		if len(r.Value) > max {
			rec.Err = fmt.Errorf("record of %d bytes exceeds the %d-byte limit", len(r.Value), max)
		}
		recs = append(recs, rec)
	}
	ptrs := t.ptrs[:0]
	for i := range recs {
		ptrs = append(ptrs, &recs[i])
	}
	if t.enr != nil {
		if err := t.enr.Enrich(context.Background(), ptrs); err != nil {
			t.s.failWith(fmt.Errorf("task %d: enrichment: %w", t.part, err))
			return
		}
	}
	t.batch = recs
	t.eng.Process(ptrs)
	t.batch = nil
	if last >= 0 {
		t.next[b.topic] = last + 1
	}
	clear(ptrs)
	clear(recs)
	t.recs, t.ptrs = recs, ptrs
}

// emit writes one output to its topic: partition p of the output topic (mod
// its partition count), so that task p's decisions are on decisions
// partition p, where recall finds them.
func (t *task) emit(o engine.Output) {
	t.observe(o)
	t.inflight[t.gen].Add(1)
	t.producer(t.gen).Produce(context.Background(), t.outRecord(o, newOutRecord()), t.ackFn[t.gen])
}

// outRecord fills r with output o, as the record emit writes.
func (t *task) outRecord(o engine.Output, r *kgo.Record) *kgo.Record {
	topic := t.s.topicOf(o.Kind)
	r.Topic, r.Partition, r.Headers = topic, t.part%t.s.counts[topic], t.headers[o.Kind]
	r.Value, r.Key = appendOrNil(r.Value, o.Value), appendOrNil(r.Key, o.Key) // nil: a null key
	return r
}

// outRecords recycles the records of outputs once the broker has
// acknowledged them (ackFn): a record and a copy of its value per output were
// a sixth of a task's CPU over Kafka. The client lets go of a record when
// it has called its promise (kgo.Client.Produce; franz-go reads nothing of
// it after).
var outRecords = sync.Pool{New: func() any { return new(kgo.Record) }}

// newOutRecord returns a zero record from outRecords, with its Key and
// Value empty but keeping their room.
func newOutRecord() *kgo.Record {
	r := outRecords.Get().(*kgo.Record)
	*r = kgo.Record{Key: r.Key[:0], Value: r.Value[:0]}
	return r
}

// appendOrNil returns b[:0] with v appended, or nil when v is empty.
func appendOrNil[T string | []byte](b []byte, v T) []byte {
	if len(v) == 0 {
		return nil
	}
	return append(b[:0], v...)
}

// acked is the produce callback of every output of generation gen (through
// ackFn: one function per generation rather than a closure per record). It
// notes a failure, for the next checkpoint to stop on, and how far our
// decisions partition is written.
func (t *task) acked(r *kgo.Record, gen int, err error) {
	defer t.inflight[gen].Done()
	if err != nil {
		t.produceErr.CompareAndSwap(nil, &err)
		return
	}
	if r.Topic != t.s.cfg.Topics.Decisions {
		return
	}
	storeMax(&t.decNext, r.Offset+1)
	storeMax(&t.decGen[gen], r.Offset+1)
}

// storeMax raises v to n, if n is larger.
func storeMax(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// observe counts an output in the metrics.
func (t *task) observe(o engine.Output) {
	m := t.s.cfg.Metrics
	if m == nil {
		return
	}
	m.RecordsOut(o.Kind.String(), 1)
	switch {
	case o.Kind == engine.KindDLQ:
		m.DLQ(o.Stream, telemetry.ClassifyDLQ(o.Reason))
	case o.Decision != nil:
		m.Decision(o.Decision.Action)
		for _, h := range o.Decision.Hits {
			if h.Err {
				m.RuleError(h.Rule)
			} else {
				m.RuleHit(h.Rule, h.Mode)
			}
		}
		if o.Index >= 0 && t.batch != nil {
			// Event to decision: from the record's timestamp (its
			// producer's clock) to now.
			m.DecisionLatency("kafka", time.Since(time.UnixMilli(t.batch[o.Index].Timestamp)))
		}
	}
}

func (s *Service) topicOf(k engine.Kind) string {
	switch k {
	case engine.KindDecision:
		return s.cfg.Topics.Decisions
	case engine.KindMatch, engine.KindTimeout:
		return s.cfg.Topics.Alerts
	case engine.KindJoin:
		return s.cfg.Topics.Joins
	case engine.KindWindow:
		return s.cfg.Topics.Windows
	case engine.KindLate:
		return s.cfg.Topics.Late
	}
	return s.cfg.Topics.DLQ
}

// gaugeEvery is how often a task reports the metrics that cost a walk over
// its keys (partial matches) or a look at its enrichments.
const gaugeEvery = 5 * time.Second

// reportGauges sends the changes since the last report: partial matches per
// pattern and the enrichments' in-flight lookups, timeouts and fallbacks.
func (t *task) reportGauges() {
	t.lastGauges = time.Now()
	m := t.s.cfg.Metrics
	if m == nil {
		return
	}
	if t.reported == nil {
		t.reported = make(map[string]int64)
	}
	delta := func(key string, now int64) int64 {
		d := now - t.reported[key]
		t.reported[key] = now
		return d
	}
	if err := t.eng.ThawError(); err != nil && err != t.thawErr {
		t.thawErr = err
		t.s.log.Error("a frozen key's checkpoint record did not decode: its state is lost", "task", t.part, "err", err)
	}
	t.eng.PatternStats(func(p string, partials int, dropped int64) {
		m.PartialMatches(p, delta("partials/"+p, int64(partials)))
		if d := delta("dropped/"+p, dropped); d > 0 {
			m.PartialsDropped(p, d)
		}
	})
	if t.enr != nil {
		t.enr.EnrichmentStats(func(e string, st asyncio.Stats) {
			m.AsyncInflight(delta("inflight/"+e, st.InFlight))
			for range delta("timeouts/"+e, st.Timeouts) {
				m.AsyncTimeout(e)
			}
			for range delta("fallbacks/"+e, st.Fallbacks) {
				m.AsyncFallback(e)
			}
		})
	}
}

// stop ends the task: the batch in hand is finished, queued batches are
// left to the next owner (they are after the checkpoint's offsets), and a
// final checkpoint is taken and committed.
func (t *task) stop(ctx context.Context) error {
	close(t.quit)
	select {
	case <-t.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer t.release() // the next owner of the partition holds its ids now
	if t.err != nil {
		return t.err
	}
	return t.checkpoint(ctx, false)
}

// release closes what a task holds from loadTask until it ends: its
// enrichment clients, its transactional producers and its engine.
func (t *task) release() {
	if t.enr != nil {
		t.enr.Close()
	}
	t.closeTxns()
	t.eng.Close()
}

// batchClock is a live task's processing time (idleness, max_future_skew):
// the wall clock read once each time the task's goroutine wakes up, for a
// batch, a request or a tick, rather than once or twice per record (reading
// the clock per record cost about 2% of a task's time).
type batchClock struct{ now int64 }

func (c *batchClock) Now() int64 { return c.now }
func (c *batchClock) read()      { c.now = time.Now().UnixMilli() }

// taskWork is what a checkpoint compares to tell whether anything changed
// since the previous one: decisions asked of the API, records fetched, and
// what the state shows of time and version. (Every output comes of one of
// them, so the decisions offset needs no comparing.)
type taskWork struct {
	decides   int64
	fetched   int64 // the sum of the next input offsets, which grows with every record fetched
	watermark int64
	version   string
}

// ownEvents are the input records the decision API wrote for this task and
// the task decided already (Decide): their offsets, as the broker
// acknowledged them, so that the task skips them when its consumer fetches
// them back instead of reading and deduplicating each (docs/design.md
// "Decision API"). The input topic stays the source of truth: after a
// restore the set is empty and the records are processed, and a record
// fetched before its acknowledgement arrived is processed too, as a known
// id that emits nothing. Produce callbacks add; the task's goroutine takes.
type ownEvents struct {
	mu      sync.Mutex
	offsets map[ownEvent]struct{}
}

type ownEvent struct {
	topic  string
	offset int64
}

// add notes an event written at offset of topic.
func (o *ownEvents) add(topic string, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.offsets == nil {
		o.offsets = make(map[ownEvent]struct{})
	}
	o.offsets[ownEvent{topic, offset}] = struct{}{}
}

// take reports whether offset of topic is an event Decide wrote, and
// forgets it.
func (o *ownEvents) take(topic string, offset int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := ownEvent{topic, offset}
	if _, ok := o.offsets[k]; ok {
		delete(o.offsets, k)
		return true
	}
	return false
}
