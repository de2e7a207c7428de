package engine

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// MaxReplayPartitions bounds the tasks one replay starts (one per partition).
const MaxReplayPartitions = 1024

// taskSet runs replay the way the service runs Kafka (DESIGN §2): one Task per
// input partition, each on its own goroutine with its own keys, watermarks and
// windows. Their outputs are merged into one deterministic order: by input
// line, then by partition; at the end of input, partition by partition.
//
// Processing time is global, as on a real machine: the largest event time seen
// on any partition so far, handed to each task with each of its records.
//
// The taskSet is driven by one goroutine (run, finish, close); each task's
// goroutine touches only its own partTask until it signals the batch done.
type taskSet struct {
	rs     *rules.Ruleset
	write  func([]byte)
	tasks  []*partTask // ordered by partition
	byPart map[int32]*partTask
	clock  int64 // processing time: the largest event time accepted so far
	floor  int64 // the highest watermark raised for every input, MinTime if none
	wg     sync.WaitGroup
}

// partTask is one partition's task and its goroutine's mailbox.
type partTask struct {
	part  int32
	task  *Task
	steps []step
	work  chan []step
	done  chan struct{}
	out   outputs // of the current batch
	cur   int     // index of the item being processed, for tagging outputs
}

// step is one item for one task: the item, its index in the batch, and the
// processing time before it.
type step struct {
	it  *item
	idx int
	now int64
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
	return &taskSet{rs: rs, write: write, byPart: map[int32]*partTask{}, clock: stream.MinTime, floor: stream.MinTime}
}

// partition returns the task of partition p, starting it on first use.
func (s *taskSet) partition(p int32) (*partTask, error) {
	if pt, ok := s.byPart[p]; ok {
		return pt, nil
	}
	if len(s.tasks) >= MaxReplayPartitions {
		return nil, fmt.Errorf("more than %d partitions in one replay", MaxReplayPartitions)
	}
	pt := &partTask{part: p, work: make(chan []step), done: make(chan struct{})}
	task, err := NewTask(s.rs, func(o Output) { pt.out.add(pt.cur, o.Value) })
	if err != nil {
		return nil, err
	}
	pt.task = task
	if s.floor != stream.MinTime {
		task.RaiseWatermark(-1, -1, s.floor) // every input, including this task's
	}
	s.byPart[p] = pt
	i, _ := slices.BinarySearchFunc(s.tasks, p, func(a *partTask, p int32) int { return cmp.Compare(a.part, p) })
	s.tasks = slices.Insert(s.tasks, i, pt)
	s.wg.Go(pt.loop)
	return pt, nil
}

func (pt *partTask) loop() {
	for steps := range pt.work {
		for _, st := range steps {
			pt.cur = st.idx
			pt.task.vt.now = st.now
			if st.it.control {
				pt.task.RaiseWatermark(st.it.stream, st.it.partition, st.it.watermark)
			} else {
				pt.task.Process(&st.it.rec)
			}
		}
		pt.done <- struct{}{}
	}
}

// run processes one batch: its items are dispatched to their tasks, which run
// in parallel, and the outputs are written in line order.
func (s *taskSet) run(b *batch) {
	for i := range b.items {
		it := &b.items[i]
		switch {
		case !it.control:
			pt, err := s.partition(it.rec.Partition)
			if err != nil {
				pt = s.tasks[0] // the record is refused; some task must count it
				it.rec.Err = err
			}
			pt.steps = append(pt.steps, step{it: it, idx: i, now: s.clock})
			s.advanceClock(&it.rec)
		case it.partition >= 0:
			pt, err := s.partition(it.partition)
			if err != nil {
				continue // a control line for a partition beyond the cap: nothing to raise
			}
			pt.steps = append(pt.steps, step{it: it, idx: i, now: s.clock})
		default:
			if it.stream < 0 {
				s.floor = max(s.floor, it.watermark)
			}
			for _, pt := range s.tasks {
				pt.steps = append(pt.steps, step{it: it, idx: i, now: s.clock})
			}
		}
	}
	busy := s.tasks[:0:0]
	for _, pt := range s.tasks {
		if len(pt.steps) > 0 {
			pt.work <- pt.steps
			busy = append(busy, pt)
		}
	}
	for _, pt := range busy {
		<-pt.done
	}
	s.merge(busy)
	for _, pt := range busy {
		pt.steps = pt.steps[:0]
	}
}

// advanceClock moves processing time as the record's task will (Task.observe):
// to its event time, unless the record goes to the DLQ.
func (s *taskSet) advanceClock(rec *Record) {
	if rec.Err != nil || rec.Stream < 0 {
		return
	}
	st := s.rs.Streams[rec.Stream]
	if st.MaxFutureSkew > 0 && s.clock != stream.MinTime && rec.Time > stream.AddSat(s.clock, st.MaxFutureSkew) {
		return
	}
	s.clock = max(s.clock, rec.Time)
}

// merge writes the tasks' outputs by item index, ties in partition order.
func (s *taskSet) merge(tasks []*partTask) {
	if len(tasks) == 1 {
		tasks[0].out.writeAll(s.write)
	} else {
		pos := make([]int, len(tasks))
		for {
			best := -1
			for i, pt := range tasks {
				if pos[i] < len(pt.out.tags) && (best < 0 || pt.out.tags[pos[i]].idx < tasks[best].out.tags[pos[best]].idx) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			out := &tasks[best].out
			s.write(out.bytes(out.tags[pos[best]]))
			pos[best]++
		}
	}
	for _, pt := range tasks {
		pt.out.reset()
	}
}

// finish ends the input: every task's watermark jumps to its maximum, in
// parallel, and the results are written partition by partition.
func (s *taskSet) finish() {
	var wg sync.WaitGroup
	for _, pt := range s.tasks {
		wg.Go(func() {
			pt.cur = 0
			pt.task.Finish()
		})
	}
	wg.Wait()
	for _, pt := range s.tasks {
		pt.out.writeAll(s.write)
		pt.out.reset()
	}
}

// close stops the task goroutines and waits for them.
func (s *taskSet) close() {
	for _, pt := range s.tasks {
		close(pt.work)
	}
	s.wg.Wait()
}

// stats sums the tasks' counters; the watermark is the lowest of theirs.
func (s *taskSet) stats() Stats {
	var total Stats
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
