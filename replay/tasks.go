package replay

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// MaxPartitions bounds the tasks one replay starts (one per partition).
const MaxPartitions = 1024

// taskSet runs replay the way the service runs Kafka (docs/design.md
// "Architecture"): one Task per input partition, each on its own goroutine
// with its own keys, watermarks and windows, started as the partition's
// first line comes, with the processing time and watermarks the replay has
// reached then (see the package doc). Their outputs are merged into one
// deterministic order: by input line, then by partition; at the end of
// input, partition by partition.
//
// Batches are pipelined: a task that has finished its share of a batch goes
// on with its share of the next while the others finish theirs, and a batch's
// outputs are merged once every task is done with it. Waiting for the slowest
// task at each batch left a core idle at every batch's end.
//
// The taskSet is driven by one goroutine (run, finish, close); each task's
// goroutine touches only its own partTask's task, out and idx, and the jobs
// it is handed until it hands them back.
type taskSet struct {
	rs       *rules.Ruleset
	write    func([]byte)
	merged   func(*batch) // called with each batch once its outputs are written
	tasks    []*partTask  // ordered by partition
	byPart   map[int32]*partTask
	pclock   replayClock // processing time
	floor    int64       // the highest watermark raised for every input, MinTime if none
	floors   []int64     // per stream, the highest watermark raised for all its partitions, MinTime if none
	inflight []flight
	records  int64 // records dispatched (for progress: the tasks' own counters are theirs)
	wg       sync.WaitGroup
	// guards are the tasks' rule guards, which stopRules stops when the
	// replay is canceled (SIGINT, SIGTERM), so that a slow rule does not
	// hold it up; stopped says that happened, for tasks started later.
	guardMu sync.Mutex
	guards  []*rules.Guard
	stopped bool
}

// stopRules stops every rule evaluation of the replay's tasks, now and
// later: it is being canceled. Safe for concurrent use.
func (s *taskSet) stopRules() {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	s.stopped = true
	for _, g := range s.guards {
		g.StopAll()
	}
}

// guard returns a new task's guard, stopped if the replay was canceled.
func (s *taskSet) guard() *rules.Guard {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	g := new(rules.Guard)
	if s.stopped {
		g.StopAll()
	}
	s.guards = append(s.guards, g)
	return g
}

// pipelineDepth is how many batches may be dispatched and not yet merged.
const pipelineDepth = 2

// flight is a batch dispatched to its tasks and not merged yet.
type flight struct {
	b    *batch
	busy []*partTask // the tasks with a job in it, in partition order
}

// partTask is one partition's task and its goroutine's mailbox.
type partTask struct {
	part int32
	task *engine.Task
	work chan *job // jobs in batch order
	done chan *job // the same jobs, run
	free []*job    // jobs to reuse (the driving goroutine's)
	next *job      // the job being filled for the batch being dispatched
	out  *outputs  // the outputs of the job being run
	idx  []int     // the batch indexes of the job being run's records, for tagging outputs
}

// job is one task's share of one batch, and its outputs.
type job struct {
	recs []*engine.Record // the records and control records, in batch order, each with its Arrival
	idx  []int            // each one's index in the batch
	out  outputs
}

// getJob returns an empty job.
func (pt *partTask) getJob() *job {
	if n := len(pt.free); n > 0 {
		j := pt.free[n-1]
		pt.free = pt.free[:n-1]
		return j
	}
	return new(job)
}

// putJob makes a merged job reusable.
func (pt *partTask) putJob(j *job) {
	clear(j.recs) // no pointers into released batches
	j.recs, j.idx = j.recs[:0], j.idx[:0]
	j.out.reset()
	pt.free = append(pt.free, j)
}

// outputs buffers one task's outputs of a batch, in order, in chunks: a
// chunk is never copied to grow (the end of input fires every window at
// once, megabytes per task), and the chunks are reused batch after batch.
type outputs struct {
	chunks [][]byte // the first used hold the outputs
	used   int
	tags   []tagged // one per output, in order
}

// outChunk is the size of a chunk; a larger output gets a chunk of its own.
const outChunk = 256 << 10

// tagged locates one output in outputs: the item that produced it, and
// where its bytes are.
type tagged struct {
	idx        int
	chunk      int
	start, end int
}

// add appends v and a newline, as the output of item idx.
func (o *outputs) add(idx int, v []byte) {
	n := len(v) + 1
	if o.used == 0 || cap(o.chunks[o.used-1])-len(o.chunks[o.used-1]) < n {
		if o.used == len(o.chunks) || cap(o.chunks[o.used]) < n {
			o.chunks = slices.Insert(o.chunks, o.used, make([]byte, 0, max(outChunk, n)))
		}
		o.used++
	}
	c := &o.chunks[o.used-1]
	start := len(*c)
	*c = append(append(*c, v...), '\n')
	o.tags = append(o.tags, tagged{idx: idx, chunk: o.used - 1, start: start, end: len(*c)})
}

// bytes returns the output a tag locates.
func (o *outputs) bytes(t tagged) []byte { return o.chunks[t.chunk][t.start:t.end] }

// writeAll writes every output, in order.
func (o *outputs) writeAll(write func([]byte)) {
	for _, c := range o.chunks[:o.used] {
		write(c)
	}
}

// reset empties o, keeping its chunks for the next batch.
func (o *outputs) reset() {
	for i := range o.chunks[:o.used] {
		o.chunks[i] = o.chunks[i][:0]
	}
	o.used, o.tags = 0, o.tags[:0]
}

func newTaskSet(rs *rules.Ruleset, write func([]byte)) *taskSet {
	s := &taskSet{rs: rs, write: write, byPart: map[int32]*partTask{}, floor: stream.MinTime,
		pclock: replayClock{start: stream.MinTime, now: stream.MinTime}}
	s.floors = make([]int64, len(rs.Streams))
	for i := range s.floors {
		s.floors[i] = stream.MinTime
	}
	return s
}

// replayClock is replay's processing time (see taskSet): the largest record
// timestamp seen so far, and the first one, when processing time began;
// both MinTime until a line carries one.
type replayClock struct{ start, now int64 }

// arrive moves the clock to the timestamp of rec, a record as it is handed
// to its task, when its line has one and could be read.
func (c *replayClock) arrive(rec *engine.Record) {
	if !rec.HasTimestamp || rec.Stream < 0 {
		return
	}
	if c.start == stream.MinTime {
		c.start = rec.Timestamp
	}
	c.now = max(c.now, rec.Timestamp)
}

// partition returns the task of partition p, starting it on first use.
func (s *taskSet) partition(p int32) (*partTask, error) {
	if pt, ok := s.byPart[p]; ok {
		return pt, nil
	}
	if len(s.tasks) >= MaxPartitions {
		return nil, fmt.Errorf("more than %d partitions in one replay", MaxPartitions)
	}
	pt := &partTask{part: p, work: make(chan *job, pipelineDepth), done: make(chan *job, pipelineDepth)}
	// The task starts with the replay, as the service's tasks start with
	// the service: its inputs have been active since processing time began.
	task, err := engine.NewTask(s.rs, pt.emit, engine.Guarded(s.guard(), nil), engine.ArrivalTime(s.pclock.start))
	if err != nil {
		return nil, err
	}
	pt.task = task
	for _, st := range s.rs.Streams {
		if st.Input() {
			task.ExpectInput(st.Index, p)
		}
	}
	if s.floor != stream.MinTime {
		task.RaiseWatermark(-1, -1, s.floor) // every input, including this task's
	}
	for st, wm := range s.floors {
		if wm != stream.MinTime {
			task.RaiseWatermark(st, -1, wm)
		}
	}
	s.byPart[p] = pt
	i, _ := slices.BinarySearchFunc(s.tasks, p, func(a *partTask, p int32) int { return cmp.Compare(a.part, p) })
	s.tasks = slices.Insert(s.tasks, i, pt)
	s.wg.Go(pt.loop)
	return pt, nil
}

// loop is the task's goroutine: it runs the jobs it is handed, in order.
func (pt *partTask) loop() {
	for j := range pt.work {
		pt.out, pt.idx = &j.out, j.idx
		pt.task.Process(j.recs)
		pt.done <- j
	}
}

// emit buffers an output of the task, tagged with the batch index of the
// record that caused it; one of no record (Finish) is written in order, so
// its tag does not matter.
func (pt *partTask) emit(o engine.Output) {
	idx := 0
	if o.Index >= 0 {
		idx = pt.idx[o.Index]
	}
	pt.out.add(idx, o.Value)
}

// step appends a record, item idx of its batch, to pt's job for the batch
// being dispatched.
func (pt *partTask) step(rec *engine.Record, idx int) {
	if pt.next == nil {
		pt.next = pt.getJob()
	}
	pt.next.recs = append(pt.next.recs, rec)
	pt.next.idx = append(pt.next.idx, idx)
}

// run dispatches one batch to its tasks, which run in parallel, and writes
// the outputs of the batches before it that every task is done with, in
// line order; merged is called with each of those batches.
func (s *taskSet) run(b *batch) {
	for i := range b.items {
		rec := &b.items[i]
		switch {
		case !rec.Control:
			s.pclock.arrive(rec)
			rec.Arrival = s.pclock.now
			pt, err := s.partition(rec.Partition)
			if err != nil {
				pt = s.tasks[0] // the record is refused; some task must count it
				rec.Err = err
			}
			pt.step(rec, i)
			s.records++
		case rec.Partition >= 0:
			pt, err := s.partition(rec.Partition)
			if err != nil {
				continue // a control line for a partition beyond the cap: nothing to raise
			}
			rec.Arrival = s.pclock.now
			pt.step(rec, i)
		default:
			if rec.Stream < 0 {
				s.floor = max(s.floor, rec.Watermark)
			} else {
				s.floors[rec.Stream] = max(s.floors[rec.Stream], rec.Watermark)
			}
			rec.Arrival = s.pclock.now // the same for every task: Process only reads it
			for _, pt := range s.tasks {
				pt.step(rec, i)
			}
		}
	}
	f := flight{b: b}
	for _, pt := range s.tasks {
		if pt.next != nil {
			pt.work <- pt.next // never blocks: at most pipelineDepth jobs are out
			pt.next = nil
			f.busy = append(f.busy, pt)
		}
	}
	s.inflight = append(s.inflight, f)
	for len(s.inflight) >= pipelineDepth {
		s.mergeOldest()
	}
}

// mergeOldest waits for the tasks of the oldest batch in flight, writes its
// outputs and hands the batch to merged.
func (s *taskSet) mergeOldest() {
	f := s.inflight[0]
	s.inflight = s.inflight[1:]
	jobs := make([]*job, len(f.busy))
	for i, pt := range f.busy {
		jobs[i] = <-pt.done // a task runs its jobs in order: this is the batch's
	}
	s.merge(jobs)
	for i, pt := range f.busy {
		pt.putJob(jobs[i])
	}
	if s.merged != nil {
		s.merged(f.b)
	}
}

// merge writes the outputs of one batch's jobs (in partition order) by item
// index, ties in partition order.
func (s *taskSet) merge(jobs []*job) {
	if len(jobs) == 1 {
		jobs[0].out.writeAll(s.write)
		return
	}
	pos := make([]int, len(jobs))
	for {
		best := -1
		for i, j := range jobs {
			if pos[i] < len(j.out.tags) && (best < 0 || j.out.tags[pos[i]].idx < jobs[best].out.tags[pos[best]].idx) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		out := &jobs[best].out
		s.write(out.bytes(out.tags[pos[best]]))
		pos[best]++
	}
}

// finish ends the input: every task's watermark jumps to its maximum, in
// parallel, and the results are written partition by partition.
func (s *taskSet) finish() {
	for len(s.inflight) > 0 {
		s.mergeOldest()
	}
	var wg sync.WaitGroup
	jobs := make([]*job, len(s.tasks))
	for i, pt := range s.tasks {
		jobs[i] = pt.getJob()
		wg.Go(func() { // the task's goroutine is idle: every job it had is merged
			pt.out, pt.idx = &jobs[i].out, nil
			pt.task.Finish()
		})
	}
	wg.Wait()
	for i, pt := range s.tasks {
		jobs[i].out.writeAll(s.write)
		pt.putJob(jobs[i])
	}
}

// abandon waits for the tasks to finish the batches in flight, and drops
// their outputs.
func (s *taskSet) abandon() {
	for _, f := range s.inflight {
		for _, pt := range f.busy {
			pt.putJob(<-pt.done)
		}
	}
	s.inflight = nil
}

// close stops the task goroutines and waits for them.
func (s *taskSet) close() {
	for _, pt := range s.tasks {
		close(pt.work)
	}
	s.wg.Wait()
}

// stats sums the tasks' counters; the watermark is the lowest of theirs.
func (s *taskSet) stats() engine.Stats {
	var total engine.Stats
	total.Watermark = stream.MaxTime
	for _, pt := range s.tasks {
		st := pt.task.Stats()
		total.Records += st.Records
		total.DLQ += st.DLQ
		total.Duplicates += st.Duplicates
		total.Decisions += st.Decisions
		total.WindowResults += st.WindowResults
		total.Late += st.Late
		total.RuleErrors += st.RuleErrors
		total.HistoryOverflow += st.HistoryOverflow
		total.Matches += st.Matches
		total.Joins += st.Joins
		total.Timeouts += st.Timeouts
		total.PartialsDropped += st.PartialsDropped
		total.Keys += st.Keys
		total.Watermark = min(total.Watermark, st.Watermark)
	}
	if len(s.tasks) == 0 {
		total.Watermark = stream.MinTime
	}
	return total
}
