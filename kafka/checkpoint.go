package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/state"
)

// A task's checkpoints (docs/design.md "Checkpoints") form a chain: a base,
// then deltas, each holding what changed since the one before. At a
// checkpoint the task marks a cut (engine.Task.Cut: the offsets, the
// globals, the set of keys changed), which takes a fraction of a
// millisecond whatever the number of keys; it then encodes the changed
// keys' records a slice at a time between its batches and requests
// (stepCut), and once they are all encoded a goroutine of the checkpoint
// waits for the outputs produced before the cut to be acknowledged,
// assembles the delta, saves it and commits the input offsets. Every
// BaseEvery deltas, that goroutine also merges the chain into a new base
// (engine.MergeSnapshots), so that a restore reads a bounded chain.
//
// A full snapshot on the task's goroutine, which holds the task for as long
// as the whole state takes to encode, is taken only when the state cannot
// take a delta: after a ruleset switch, or a restore of state written under
// another version or by an older build (engine.Task.NeedsBase).

// cutSlice is how long the task encodes a cut's records at a time before it
// looks at its batches and requests again.
const cutSlice = 500 * time.Microsecond

// ckptState is the task's checkpoint chain and the cut in progress. The
// task's goroutine owns it while it holds no cut, and the checkpoint's
// goroutine from the end of the cut until it releases task.saving.
type ckptState struct {
	seq       uint64 // the latest snapshot saved (or restored)
	chain     int    // snapshots in its chain; 0: none yet, the next is a base
	decisions int64  // the decisions offset the latest snapshot holds
	cut       *pendingCut
}

// pendingCut is a checkpoint whose records the task is still encoding.
type pendingCut struct {
	cut    *engine.Cut
	snap   *state.Snapshot // without its engine section yet
	commit map[string]map[int32]kgo.EpochOffset
	gen    int // the output generation before the cut
	start  time.Time
}

// backlogPause is how many times as long as its last cut took a task
// behind its input waits before it cuts again, past the interval: at most a
// tenth of its time goes to checkpoints while it catches up. Under a backlog
// every key changes between two cuts, so each cut encodes nearly the whole
// state again; under exactly-once, at 100 ms commits, that was 15% of the
// CPU of a service catching up (docs/performance.md). A task with nothing
// queued checkpoints on the interval, as the latency of its outputs then
// depends on it.
const backlogPause = 9

// checkpointDue reports whether the task checkpoints now: its interval has
// passed (and, while batches are queued, backlogPause times its last cut's
// duration too), or the changes waiting for a cut have piled up.
func (t *task) checkpointDue() bool {
	if t.eng.Overdue() {
		return false // the loop fires them a slice at a time first (stepCut)
	}
	if t.eng.Changes() >= t.s.cfg.CheckpointMaxChanges {
		return true
	}
	// Half a tick early counts: the tick that comes an interval after the
	// last checkpoint finds a hair less than the interval about as often as
	// a hair more, and at a 100 ms interval on a 100 ms tick every other
	// checkpoint slipped to the next tick.
	since := time.Since(t.lastCkpt) + t.tickEvery()/2
	if since < t.s.cfg.CheckpointInterval {
		return false
	}
	return len(t.in) == 0 || since >= backlogPause*t.cutCost
}

// checkpoint starts a checkpoint of the task (see above). With background
// unset (the final checkpoint of a stopping task) it finishes a cut in
// progress and saves, then cuts, encodes and saves again, all before it
// returns; otherwise a checkpoint due while the previous one is still being
// cut or saved is skipped, and so is one of a task that did nothing since.
func (t *task) checkpoint(ctx context.Context, background bool) error {
	if t.ckpt.cut != nil {
		if background {
			return nil // the previous one is still being cut
		}
		t.finishCut()
	}
	if background && !t.saving.tryLock() {
		return nil // the previous one is still being saved
	}
	if !background {
		if err := t.saving.lock(ctx); err != nil {
			return fmt.Errorf("waiting for the checkpoint in flight: %w", err)
		}
	}
	if err := t.produceErr.Load(); err != nil {
		t.saving.unlock()
		return fmt.Errorf("output not acknowledged: %w", *err)
	}
	// Windows still due fire now, before the outputs change generation:
	// the cut holds them fired, so this checkpoint must wait for them
	// (checkpointDue waits for the loop's slices to do it instead).
	t.eng.Drain(0)
	w := t.work
	w.watermark, w.version = t.eng.Watermark(), t.rs.Version
	for _, off := range t.next {
		w.fetched += off
	}
	if background && t.checkpointed != nil && *t.checkpointed == w {
		// Nothing happened since the last checkpoint: writing an empty
		// delta would only lengthen the chain.
		t.lastCkpt = time.Now()
		t.saving.unlock()
		return nil
	}
	t.checkpointed = &w
	t.lastCkpt = time.Now()

	pc := &pendingCut{gen: t.gen, start: time.Now(), commit: make(map[string]map[int32]kgo.EpochOffset, len(t.next))}
	pc.snap = &state.Snapshot{Task: t.part, Seq: t.ckpt.seq + 1, Offsets: make(map[string]int64),
		Sections: map[string][]byte{sectionRuleset: []byte(t.rs.Version)}}
	for topic, off := range t.next {
		pc.snap.Offsets[inPrefix+topic] = off
		pc.commit[topic] = map[int32]kgo.EpochOffset{t.part: {Epoch: -1, Offset: off}}
	}
	// Outputs from now on are the next checkpoint's to wait for.
	t.gen ^= 1
	t.decGen[t.gen].Store(0)

	if t.ckpt.chain == 0 || t.eng.NeedsBase() {
		data, err := t.eng.Base() // the base the next deltas extend
		if err != nil {
			t.saving.unlock()
			return fmt.Errorf("snapshot: %w", err)
		}
		pc.snap.Sections[sectionEngine] = data
		return t.save(ctx, pc, background)
	}
	c, err := t.eng.Cut()
	if err != nil {
		t.saving.unlock()
		return fmt.Errorf("cut: %w", err)
	}
	pc.cut, pc.snap.Parent = c, t.ckpt.seq
	if !background {
		t.eng.Step(0)
		return t.save(ctx, pc, false)
	}
	t.ckpt.cut = pc
	t.stepCut()
	return nil
}

// stepCut is the loop's slice of work between batches and requests: it
// fires windows an advance left due (engine.Task.Drain), else encodes the
// records of the cut in progress, else thaws and freezes keys (coolStep),
// for a slice of time each, and asks for another slice until all are done.
// A cut done is saved on a goroutine of its own. Slices wait for the
// requests queued, and for their pace (pace.go).
func (t *task) stepCut() {
	if len(t.calls) > 0 {
		// A request waits: it goes first (the loop's select is random).
		t.signalStep()
		return
	}
	if pause := time.Until(t.nextSlice); pause > 0 {
		t.sliceTimer.Reset(pause)
		return
	}
	start := time.Now()
	if !t.slice() {
		return
	}
	took := time.Since(start)
	pause := pauseAfter(took, t.s.pace.Duty())
	t.nextSlice = start.Add(took + pause)
	if pause > 0 {
		t.sliceTimer.Reset(pause)
	} else {
		t.signalStep()
	}
}

// slice does one slice of stepCut's work and reports whether there is more.
func (t *task) slice() bool {
	if t.eng.Overdue() && !t.eng.Drain(cutSlice) {
		return true
	}
	if t.ckpt.cut == nil {
		return t.coolStep()
	}
	if !t.eng.Step(cutSlice) {
		return true
	}
	pc := t.ckpt.cut
	t.ckpt.cut = nil
	t.save(context.Background(), pc, true) // errors are reported by the goroutine
	return false
}

// finishCut encodes whatever the cut in progress still needs at once (the
// task must not cut again, switch versions or stop with a cut unfinished),
// and starts its save.
func (t *task) finishCut() {
	if pc := t.ckpt.cut; pc != nil {
		t.eng.Step(0)
		t.ckpt.cut = nil
		t.save(context.Background(), pc, true)
	}
}

// save waits for the outputs produced before the cut, completes the
// snapshot, saves it and commits the input offsets to the group (for lag
// monitoring: the checkpoint is what restores); with background set it
// does so on a goroutine of its own, which fails the service on an error,
// and returns at once. It releases task.saving when done. It runs on the
// task's goroutine once the cut's records are all encoded: the cut's cost
// (checkpointDue) is measured here.
func (t *task) save(ctx context.Context, pc *pendingCut, background bool) error {
	t.cutCost = time.Since(pc.start)
	run := func() error {
		defer t.saving.unlock()
		err := t.saveCut(ctx, pc)
		if err != nil {
			t.failTxn(pc.gen, err) // the requests waiting for its commit
		}
		return err
	}
	if !background {
		return run()
	}
	go func() {
		if err := run(); err != nil {
			t.s.failWith(fmt.Errorf("task %d: checkpoint: %w", t.part, err))
		}
	}()
	return nil
}

func (t *task) saveCut(ctx context.Context, pc *pendingCut) error {
	if err := waitCtx(ctx, &t.inflight[pc.gen]); err != nil {
		return fmt.Errorf("outputs not acknowledged: %w", err)
	}
	if err := t.produceErr.Load(); err != nil {
		return fmt.Errorf("output not acknowledged: %w", *err)
	}
	snap := pc.snap
	if pc.cut != nil {
		data, err := pc.cut.Bytes()
		if err != nil {
			return fmt.Errorf("cut: %w", err)
		}
		snap.Sections[sectionEngine] = data
	}
	// The decisions before the cut were all produced in generation
	// pc.gen, and on one partition offsets follow produce order.
	dec := max(t.ckpt.decisions, t.decGen[pc.gen].Load())
	snap.Offsets[outPrefix+t.s.cfg.Topics.Decisions] = dec
	err := t.store(ctx, snap, pc.commit, pc.gen)
	t.s.cfg.Metrics.Checkpoint(time.Since(pc.start), int64(len(snap.Sections[sectionEngine])), err)
	if err != nil {
		return err
	}
	t.ckpt.seq, t.ckpt.decisions = snap.Seq, dec
	if snap.Parent == 0 {
		t.ckpt.chain = 1
	} else {
		t.ckpt.chain++
	}
	if t.ckpt.chain > t.s.cfg.CheckpointBaseEvery {
		return t.compact(ctx, pc.gen)
	}
	return nil
}

// saveLock is task.saving: a lock the final checkpoint can give up on
// when the shutdown's time is up, which a sync.Mutex cannot (the save it
// waits for may be waiting for a broker that no longer answers).
type saveLock chan struct{}

func (l saveLock) tryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l saveLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l saveLock) unlock() { <-l }

// waitCtx waits for wg, or until ctx ends. (The goroutine that waits goes
// on until wg is done: at the latest when the client closes and fails what
// it still holds.)
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	if ctx.Done() == nil {
		wg.Wait()
		return nil
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// compact merges the task's chain, read back from the store, into a new
// base with the state and offsets of its last delta. Under exactly-once
// the base is saved in a transaction of generation gen's producer, which
// has just committed the delta and holds no output yet.
func (t *task) compact(ctx context.Context, gen int) error {
	start := time.Now()
	chain, err := t.s.ckpt.Chain(ctx, t.part)
	if err != nil {
		return fmt.Errorf("compaction: %w", err)
	}
	tip := chain[len(chain)-1]
	if tip.Seq != t.ckpt.seq {
		return fmt.Errorf("compaction: the store's latest snapshot is %d, the task saved %d", tip.Seq, t.ckpt.seq)
	}
	data := make([][]byte, len(chain))
	for i, s := range chain {
		data[i] = s.Sections[sectionEngine]
	}
	merged, err := engine.MergeSnapshots(data)
	if err != nil {
		return fmt.Errorf("compaction: %w", err)
	}
	base := &state.Snapshot{Task: t.part, Seq: tip.Seq + 1, Offsets: maps.Clone(tip.Offsets),
		Sections: map[string][]byte{sectionEngine: merged, sectionRuleset: tip.Sections[sectionRuleset]}}
	err = t.store(ctx, base, nil, gen)
	t.s.cfg.Metrics.Checkpoint(time.Since(start), int64(len(merged)), err)
	if err != nil {
		return fmt.Errorf("compaction: %w", err)
	}
	t.ckpt.seq, t.ckpt.chain = base.Seq, 1
	return nil
}

// store saves snap (under exactly-once, in generation gen's transaction,
// which it commits) and commits the input offsets in commit, if any.
func (t *task) store(ctx context.Context, snap *state.Snapshot, commit map[string]map[int32]kgo.EpochOffset, gen int) error {
	var err error
	if t.txn[gen] != nil {
		err = t.saveInTxn(ctx, snap, gen)
	} else {
		err = t.s.ckpt.Save(ctx, snap)
	}
	if err != nil {
		var pe *state.PruneError
		if !errors.As(err, &pe) {
			return err
		}
		t.s.log.Warn("checkpoint saved; pruning failed", "task", t.part, "err", err)
	}
	if len(commit) == 0 {
		return nil
	}
	t.s.cl.CommitOffsetsSync(ctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			t.s.log.Warn("offset commit failed (the checkpoint holds the offsets)", "task", t.part, "err", err)
		}
	})
	return nil
}
