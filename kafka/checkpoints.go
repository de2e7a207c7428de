package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/state"
)

// DefaultChunkBytes is the largest chunk value a CheckpointStore produces
// when CheckpointStoreConfig.ChunkBytes is 0: half of the 1 MiB message
// limit that brokers and producers apply by default, so that a chunk, its
// headers and its batch framing fit with room to spare.
const DefaultChunkBytes = 512 << 10

// Record headers of a checkpoint chunk. Every value is a decimal number in
// ASCII, so that the records can be read with kcat.
const (
	ckptHdrTask   = "task"   // the task, = the partition
	ckptHdrSeq    = "seq"    // the snapshot's Seq
	ckptHdrChunk  = "chunk"  // index of this chunk, 0 .. chunks-1
	ckptHdrChunks = "chunks" // number of chunks of the snapshot
	ckptHdrLength = "length" // length of the whole encoding, in bytes
)

const (
	// ckptChunkOverhead bounds the bytes a chunk record adds to its value:
	// batch framing, record framing and the five headers.
	ckptChunkOverhead = 4 << 10
	// ckptKgoBatchBytes and ckptBrokerMessageBytes are the default
	// limits of a produced batch on the client (kgo) and on a topic.
	ckptKgoBatchBytes      = 1000012
	ckptBrokerMessageBytes = 1048588
	// ckptMaxChunks caps the chunk count a header may declare.
	ckptMaxChunks = 1 << 24
	// ckptFetchTimeout bounds one read of a range of a partition that the
	// listing of its offsets said was there.
	ckptFetchTimeout = 30 * time.Second
)

// CheckpointStoreConfig configures NewCheckpointStore. The zero value is
// valid.
type CheckpointStoreConfig struct {
	// Keep is how many snapshots per task Save keeps (default
	// state.DefaultKeep; negative is refused). Keep at least 2 so that a
	// corrupt newest snapshot still leaves one to fall back to.
	Keep int
	// OnCorrupt, if set, is called by Latest for each record or group of
	// records it skips: where names them ("topic/partition@first-last"), err
	// wraps state.ErrCorrupt or is a *state.VersionError. It runs on the
	// goroutine calling Latest while the task is locked: it must not call
	// the store for the same task.
	OnCorrupt func(where string, err error)
	// ChunkBytes is the largest value of one record (default
	// DefaultChunkBytes). Larger values need a matching max.message.bytes on
	// the topic (set when the store creates it) and on the brokers.
	ChunkBytes int
	// ClientOpts are added to the options of every client the store makes
	// (TLS, SASL, logging).
	ClientOpts []kgo.Opt
}

// CheckpointStore keeps task snapshots on a Kafka topic: task p's snapshots on partition p.
//
// It is a state.Backend that any process of a consumer group can read, so
// that when partition p moves to another process (a rebalance, a pod
// rescheduled) the new owner restores task p from where the old one left it,
// which a local state.Dir cannot offer.
//
// # Record layout
//
// Save encodes a snapshot with state.Encode (which ends in a CRC-32C of the
// rest) and splits the bytes into chunks of at most ChunkBytes. Chunk i of n
// is one record on partition Task, produced in order, with no key, the chunk
// as value, and the headers task, seq, chunk (i), chunks (n) and length (of
// the whole encoding), all decimal. A snapshot is complete when its n chunks
// sit at n consecutive offsets with indexes 0 .. n-1 and the same task, seq,
// chunks and length headers; it is only there once its last chunk is.
//
// Save waits for every chunk to be acknowledged by all in-sync replicas (the
// producer is idempotent, so a retried chunk is neither doubled nor
// reordered). A Save interrupted by a crash or an error leaves a torn run of
// chunks without its last one, which Latest skips.
//
// # Finding the tail
//
// Latest lists the partition's start and end offsets and reads backwards from
// the end, never from the start: it reads the last record, whose chunk
// header says how many records before it belong to the same snapshot, then
// exactly those, then the record before them, guessing that the previous
// snapshot has as many chunks as the one just read. The first snapshot that
// is complete, decodes with state.Decode (CRC included) and holds the task
// and seq of its headers is returned; every torn run, foreign record or
// corrupt snapshot after it is reported to OnCorrupt and skipped.
//
// # Trimming
//
// After a successful Save, the store deletes (kadm DeleteRecords) the
// records before the first chunk of the Keep-th newest snapshot it knows of:
// the ones it saved itself and the one Latest returned. A process that has
// just restored a task therefore keeps a few more than Keep snapshots until
// it has saved Keep-1 of its own. The topic is created with
// cleanup.policy=delete and no time or size retention, so that only these
// deletions remove snapshots (an idle task keeps its checkpoint forever).
// A failed deletion is returned as a *state.PruneError: the snapshot counts
// as saved, and the next Save deletes up to a newer offset anyway.
//
// # Fencing
//
// Two processes must not save the same task at the same time. The consumer
// group ensures that one member owns partition p of the inputs, and only
// the owner saves task p. This is no fence: a zombie owner (a process that
// has lost its partitions but not yet noticed, after a long GC pause or a
// network partition) can still produce chunks. Its chunks and the new
// owner's may interleave, which makes both snapshots torn (Save detects that
// its chunks are not consecutive and fails), or it may append a complete
// snapshot that is older in content but newer on the log, which Latest would
// return. Deployments that cannot rule out zombies need a fence in front of
// Save, for example a transactional producer per task.
//
// # Concurrency
//
// A CheckpointStore is safe for concurrent use: calls for different tasks
// run in parallel on one shared producer client (each Latest reads through
// a consumer client of its own); calls for the same task are serialised by a
// per-task lock. Seq must exceed the task's latest Seq: the one this store
// last saved or returned from Latest, or, before either, the seq header of
// the last chunk on the partition; otherwise Save fails with
// state.ErrStaleSeq.
type CheckpointStore struct {
	brokers []string
	topic   string
	cfg     CheckpointStoreConfig
	cl      *kgo.Client // producer; also carries the admin requests
	adm     *kadm.Client
	mu      struct {
		sync.Mutex
		partitions int32 // of the topic, as last seen
		tasks      map[int32]*ckptTask
	}
}

var _ state.Backend = (*CheckpointStore)(nil)

// ckptTask serialises one task's calls and remembers what the store learned
// about its snapshots.
type ckptTask struct {
	mu    sync.Mutex
	known bool   // has and seq were set by a Save or Latest of this store
	has   bool   // the task has a snapshot
	seq   uint64 // its Seq, if has
	// starts holds the first offsets of the newest complete snapshots this
	// store knows of, oldest first (at most Keep after a prune).
	starts []int64
}

// NewCheckpointStore returns a store on topic, creating the topic when it is
// missing with partitions partitions (the task count), cleanup.policy=delete
// and unlimited retention. An existing topic is used as it is; a compacted
// one is refused. If it has fewer partitions than a task needs, Save and
// Latest fail for that task with an error saying so. Close releases the
// store's client.
func NewCheckpointStore(ctx context.Context, brokers []string, topic string, partitions int32, cfg CheckpointStoreConfig) (*CheckpointStore, error) {
	if topic == "" {
		return nil, errors.New("checkpoint store: no topic")
	}
	if partitions < 1 {
		return nil, fmt.Errorf("checkpoint store %s: %d partitions: need at least 1", topic, partitions)
	}
	if cfg.Keep == 0 {
		cfg.Keep = state.DefaultKeep
	}
	if cfg.Keep < 1 {
		return nil, fmt.Errorf("checkpoint store %s: Keep %d: must be at least 1", topic, cfg.Keep)
	}
	if cfg.ChunkBytes == 0 {
		cfg.ChunkBytes = DefaultChunkBytes
	}
	if cfg.ChunkBytes < 1 || cfg.ChunkBytes > 512<<20 {
		return nil, fmt.Errorf("checkpoint store %s: ChunkBytes %d: must be between 1 and %d", topic, cfg.ChunkBytes, 512<<20)
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, cfg.ClientOpts...)
	opts = append(opts,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	if need := cfg.ChunkBytes + ckptChunkOverhead; need > ckptKgoBatchBytes {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(need)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store %s: %w", topic, err)
	}
	c := &CheckpointStore{brokers: brokers, topic: topic, cfg: cfg, cl: cl, adm: kadm.NewClient(cl)}
	c.mu.tasks = make(map[int32]*ckptTask)
	n, err := c.ensureTopic(ctx, partitions)
	if err != nil {
		cl.Close()
		return nil, err
	}
	c.mu.partitions = n
	return c, nil
}

// Close closes the store's producer client. Calls in progress fail.
func (c *CheckpointStore) Close() { c.cl.Close() }

// Topic returns the topic the store keeps its snapshots on.
func (c *CheckpointStore) Topic() string { return c.topic }

func (c *CheckpointStore) ensureTopic(ctx context.Context, partitions int32) (int32, error) {
	n, ok, err := c.partitionCount(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		cfgs := map[string]*string{
			"cleanup.policy":  new("delete"),
			"retention.ms":    new("-1"),
			"retention.bytes": new("-1"),
		}
		if need := c.cfg.ChunkBytes + ckptChunkOverhead; need > ckptBrokerMessageBytes {
			cfgs["max.message.bytes"] = new(strconv.Itoa(need))
		}
		resp, err := c.adm.CreateTopic(ctx, partitions, -1, cfgs, c.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("checkpoint store: create topic %s: %w", c.topic, err)
		}
		// A topic created a moment ago may not be in the metadata yet.
		for i := 0; ; i++ {
			if n, ok, err = c.partitionCount(ctx); err != nil || ok {
				break
			}
			if i == 50 {
				return 0, fmt.Errorf("checkpoint store: topic %s was created but does not show in the metadata", c.topic)
			}
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("checkpoint store: topic %s: %w", c.topic, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			return 0, err
		}
	}
	// Compaction keeps the last record per key: it would drop chunks (and a
	// compacted topic refuses records without a key anyway). A topic whose
	// configuration cannot be read is given the benefit of the doubt.
	if rcs, err := c.adm.DescribeTopicConfigs(ctx, c.topic); err == nil {
		for _, rc := range rcs {
			for _, kv := range rc.Configs {
				if rc.Err == nil && kv.Key == "cleanup.policy" && kv.Value != nil && strings.Contains(*kv.Value, "compact") {
					return 0, fmt.Errorf("checkpoint store: topic %s has cleanup.policy=%s; checkpoints need cleanup.policy=delete "+
						"(compaction would drop chunks)", c.topic, *kv.Value)
				}
			}
		}
	}
	return n, nil
}

// partitionCount returns the topic's partition count and whether it exists.
func (c *CheckpointStore) partitionCount(ctx context.Context) (int32, bool, error) {
	md, err := c.adm.ListTopics(ctx, c.topic)
	if err != nil {
		return 0, false, fmt.Errorf("checkpoint store: list topic %s: %w", c.topic, err)
	}
	d, ok := md[c.topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return 0, false, nil
	}
	if d.Err != nil {
		return 0, false, fmt.Errorf("checkpoint store: topic %s: %w", c.topic, d.Err)
	}
	if len(d.Partitions) == 0 {
		return 0, false, nil
	}
	return int32(len(d.Partitions)), true, nil
}

// checkTask fails for a task that has no partition on the topic, looking at
// the metadata again before it does (partitions may have been added).
func (c *CheckpointStore) checkTask(ctx context.Context, task int32) error {
	if task < 0 {
		return fmt.Errorf("negative task %d", task)
	}
	c.mu.Lock()
	n := c.mu.partitions
	c.mu.Unlock()
	if task < n {
		return nil
	}
	m, ok, err := c.partitionCount(ctx)
	if err != nil {
		return err
	}
	if ok {
		c.mu.Lock()
		c.mu.partitions = max(c.mu.partitions, m)
		c.mu.Unlock()
		n = m
	}
	if task < n {
		return nil
	}
	return fmt.Errorf("checkpoint topic %s has %d partitions, but task %d keeps its snapshots on partition %d: "+
		"the topic needs at least %d partitions (one per task); add partitions to it", c.topic, n, task, task, task+1)
}

func (c *CheckpointStore) task(task int32) *ckptTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.mu.tasks[task]
	if t == nil {
		t = &ckptTask{}
		c.mu.tasks[task] = t
	}
	return t
}

// Save produces s as the task's newest snapshot and waits until every chunk
// is acknowledged; then it deletes the records before the newest Keep
// snapshots it knows of. s.Seq must be above the task's latest Seq
// (state.ErrStaleSeq otherwise). A *state.PruneError means s was saved. On
// any other error s may have left a torn run of chunks, which Latest skips.
// Save does not keep s.
func (c *CheckpointStore) Save(ctx context.Context, s *state.Snapshot) error {
	if s == nil {
		return errors.New("checkpoint store: save: nil snapshot")
	}
	fail := func(err error) error {
		return fmt.Errorf("checkpoint store %s: save task %d seq %d: %w", c.topic, s.Task, s.Seq, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := c.checkTask(ctx, s.Task); err != nil {
		return fail(err)
	}
	t := c.task(s.Task)
	t.mu.Lock()
	defer t.mu.Unlock()

	if !t.known {
		seq, has, err := c.lastSeq(ctx, s.Task)
		if err != nil {
			return fail(err)
		}
		t.known, t.has, t.seq = true, has, seq
	}
	if t.has && s.Seq <= t.seq {
		return fail(fmt.Errorf("%w (latest is %d)", state.ErrStaleSeq, t.seq))
	}
	recs := ckptRecords(c.topic, s, c.cfg.ChunkBytes)
	res := c.cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return fail(err)
	}
	first, last := res[0].Record.Offset, res[len(res)-1].Record.Offset
	if last-first != int64(len(recs)-1) {
		return fail(fmt.Errorf("its %d chunks landed at offsets %d-%d, interleaved with other records: "+
			"is another process saving task %d?", len(recs), first, last, s.Task))
	}
	t.has, t.seq = true, s.Seq
	t.starts = append(t.starts, first)
	return c.prune(ctx, s.Task, t)
}

// ckptRecords splits the encoding of s into chunk records for partition
// s.Task of topic.
func ckptRecords(topic string, s *state.Snapshot, chunkBytes int) []*kgo.Record {
	b := state.Encode(s)
	n := max(1, (len(b)+chunkBytes-1)/chunkBytes)
	task := strconv.FormatInt(int64(s.Task), 10)
	seq := strconv.FormatUint(s.Seq, 10)
	chunks := strconv.Itoa(n)
	length := strconv.Itoa(len(b))
	recs := make([]*kgo.Record, n)
	for i := range n {
		lo, hi := i*chunkBytes, min((i+1)*chunkBytes, len(b))
		recs[i] = &kgo.Record{
			Topic:     topic,
			Partition: s.Task,
			Value:     b[lo:hi:hi],
			Headers: []kgo.RecordHeader{
				{Key: ckptHdrTask, Value: []byte(task)},
				{Key: ckptHdrSeq, Value: []byte(seq)},
				{Key: ckptHdrChunk, Value: []byte(strconv.Itoa(i))},
				{Key: ckptHdrChunks, Value: []byte(chunks)},
				{Key: ckptHdrLength, Value: []byte(length)},
			},
		}
	}
	return recs
}

// prune deletes the task's records before the first chunk of the Keep-th
// newest snapshot in t.starts.
func (c *CheckpointStore) prune(ctx context.Context, task int32, t *ckptTask) error {
	if len(t.starts) <= c.cfg.Keep {
		return nil
	}
	cut := t.starts[len(t.starts)-c.cfg.Keep]
	t.starts = append(t.starts[:0], t.starts[len(t.starts)-c.cfg.Keep:]...)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: c.topic, Partition: task, At: cut, LeaderEpoch: -1})
	resps, err := c.adm.DeleteRecords(ctx, os)
	if err == nil {
		r, ok := resps.Lookup(c.topic, task)
		switch {
		case !ok:
			err = errors.New("no answer for the partition")
		case r.Err != nil:
			err = r.Err
		}
	}
	if err != nil {
		return &state.PruneError{File: fmt.Sprintf("%s/%d before offset %d", c.topic, task, cut), Err: err}
	}
	return nil
}

// Latest returns the task's newest complete snapshot that decodes and
// verifies and whose task and seq match its headers, reading the partition
// backwards from its end. Each newer run of records that does not qualify
// (a torn save, a corrupt chunk, a record that is no chunk) is reported to
// OnCorrupt and skipped. It returns state.ErrNoSnapshot if the partition
// holds no complete snapshot, an error wrapping state.ErrCorrupt if it
// holds some but none verifies. The sections of the returned snapshot are
// the caller's.
func (c *CheckpointStore) Latest(ctx context.Context, task int32) (*state.Snapshot, error) {
	fail := func(err error) error {
		return fmt.Errorf("checkpoint store %s: latest of task %d: %w", c.topic, task, err)
	}
	if err := c.checkTask(ctx, task); err != nil {
		return nil, fail(err)
	}
	t := c.task(task)
	t.mu.Lock()
	defer t.mu.Unlock()

	tr, err := c.newTail(ctx, task)
	if err != nil {
		return nil, fail(err)
	}
	defer tr.close()
	report := func(first, last int64, err error) {
		if c.cfg.OnCorrupt == nil {
			return
		}
		where := fmt.Sprintf("%s/%d@%d", c.topic, task, first)
		if last != first {
			where += "-" + strconv.FormatInt(last, 10)
		}
		c.cfg.OnCorrupt(where, err)
	}
	guess := int64(1) // records to read at once when nothing says how many
	complete := 0     // complete snapshots found that did not verify
	for pos := tr.hi - 1; pos >= tr.lo; {
		if err := ctx.Err(); err != nil {
			return nil, fail(err)
		}
		if err := tr.fetch(ctx, pos-guess+1); err != nil {
			return nil, fail(err)
		}
		r := tr.get(pos)
		if r == nil { // deleted while we read
			pos--
			continue
		}
		h, err := parseCkptChunk(r)
		if err == nil && h.task != task {
			err = fmt.Errorf("%w: a chunk of task %d", state.ErrCorrupt, h.task)
		}
		if err != nil {
			report(pos, pos, err)
			tr.forget(pos)
			pos--
			continue
		}
		// The records pos-h.chunk .. pos should be chunks 0 .. h.chunk.
		if err := tr.fetch(ctx, pos-int64(h.chunk)); err != nil {
			return nil, fail(err)
		}
		start := pos
		for start > pos-int64(h.chunk) {
			p := tr.get(start - 1)
			if p == nil {
				break
			}
			ph, err := parseCkptChunk(p)
			if err != nil || ph.task != h.task || ph.seq != h.seq || ph.chunks != h.chunks || ph.length != h.length ||
				ph.chunk != h.chunk-int(pos-start+1) {
				break
			}
			start--
		}
		first := h.chunk - int(pos-start) // index of the chunk at start
		switch {
		case first != 0 || h.chunk != h.chunks-1:
			report(start, pos, fmt.Errorf("%w: incomplete snapshot seq %d: chunks %d-%d of %d "+
				"(a save interrupted before its last chunk, or chunks missing)", state.ErrCorrupt, h.seq, first, h.chunk, h.chunks))
		default:
			complete++
			s, err := tr.assemble(start, pos, h)
			if err != nil {
				report(start, pos, err)
				break
			}
			t.known, t.has, t.seq = true, true, s.Seq
			t.starts = append(t.starts[:0], start)
			return s, nil
		}
		tr.forget(start)
		pos = start - 1
		guess = min(int64(h.chunks), 256) // the previous snapshot is likely as large
	}
	// Whatever is on the partition cannot be restored, so a fresh start may
	// save from any Seq.
	t.known, t.has, t.starts = true, false, t.starts[:0]
	if complete > 0 {
		return nil, fail(fmt.Errorf("none of %d complete snapshots verifies: %w", complete, state.ErrCorrupt))
	}
	return nil, state.ErrNoSnapshot
}

// lastSeq returns the seq header of the task's last chunk on the partition,
// complete or not; false if the partition holds none.
func (c *CheckpointStore) lastSeq(ctx context.Context, task int32) (uint64, bool, error) {
	tr, err := c.newTail(ctx, task)
	if err != nil {
		return 0, false, err
	}
	defer tr.close()
	guess := int64(1)
	for pos := tr.hi - 1; pos >= tr.lo; pos-- {
		if err := tr.fetch(ctx, pos-guess+1); err != nil {
			return 0, false, err
		}
		guess = min(2*guess, 1024)
		if r := tr.get(pos); r != nil {
			if h, err := parseCkptChunk(r); err == nil && h.task == task {
				return h.seq, true, nil
			}
		}
		tr.forget(pos)
	}
	return 0, false, nil
}

type ckptChunkHeader struct {
	task          int32
	seq           uint64
	chunk, chunks int
	length        int64
}

// parseCkptChunk reads the headers of a chunk record; an error wraps
// state.ErrCorrupt.
func parseCkptChunk(r *kgo.Record) (ckptChunkHeader, error) {
	var h ckptChunkHeader
	var seen int
	var err error
	num := func(key string, v []byte, lo, hi int64) int64 {
		n, perr := strconv.ParseInt(string(v), 10, 64)
		if perr != nil || n < lo || n > hi {
			if err == nil {
				err = fmt.Errorf("%w: header %s=%q", state.ErrCorrupt, key, v)
			}
		}
		return n
	}
	for _, kv := range r.Headers {
		switch kv.Key {
		case ckptHdrTask:
			h.task = int32(num(kv.Key, kv.Value, 0, 1<<31-1))
		case ckptHdrSeq:
			n, perr := strconv.ParseUint(string(kv.Value), 10, 64)
			if perr != nil && err == nil {
				err = fmt.Errorf("%w: header %s=%q", state.ErrCorrupt, kv.Key, kv.Value)
			}
			h.seq = n
		case ckptHdrChunk:
			h.chunk = int(num(kv.Key, kv.Value, 0, ckptMaxChunks-1))
		case ckptHdrChunks:
			h.chunks = int(num(kv.Key, kv.Value, 1, ckptMaxChunks))
		case ckptHdrLength:
			h.length = num(kv.Key, kv.Value, 0, 1<<62)
		default:
			continue
		}
		seen++
	}
	switch {
	case err != nil:
		return h, err
	case seen != 5:
		return h, fmt.Errorf("%w: not a checkpoint chunk (headers task, seq, chunk, chunks, length expected once each)", state.ErrCorrupt)
	case h.chunk >= h.chunks:
		return h, fmt.Errorf("%w: chunk %d of %d", state.ErrCorrupt, h.chunk, h.chunks)
	}
	return h, nil
}

// ckptTail reads one partition backwards: it fetches ranges ending where
// the previous one began, and keeps the records until they are forgotten.
type ckptTail struct {
	c      *CheckpointStore
	task   int32
	lo, hi int64 // the partition's start and end offsets when reading began
	from   int64 // records [from, hi) have been fetched
	recs   map[int64]*kgo.Record
	cl     *kgo.Client // created by the first fetch
}

func (c *CheckpointStore) newTail(ctx context.Context, task int32) (*ckptTail, error) {
	starts, err := c.adm.ListStartOffsets(ctx, c.topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := c.adm.ListEndOffsets(ctx, c.topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	lo, ok1 := starts.Lookup(c.topic, task)
	hi, ok2 := ends.Lookup(c.topic, task)
	switch {
	case !ok1 || !ok2:
		return nil, fmt.Errorf("no offsets listed for partition %d", task)
	case lo.Err != nil:
		return nil, fmt.Errorf("start offset of partition %d: %w", task, lo.Err)
	case hi.Err != nil:
		return nil, fmt.Errorf("end offset of partition %d: %w", task, hi.Err)
	}
	return &ckptTail{c: c, task: task, lo: lo.Offset, hi: hi.Offset, from: hi.Offset, recs: make(map[int64]*kgo.Record)}, nil
}

// fetch makes sure that the records from at (or the start) to the end have
// been read.
func (r *ckptTail) fetch(ctx context.Context, at int64) error {
	at = max(at, r.lo)
	if at >= r.from {
		return nil
	}
	to := r.from
	topic := r.c.topic
	if r.cl == nil {
		opts := append([]kgo.Opt{kgo.SeedBrokers(r.c.brokers...)}, r.c.cfg.ClientOpts...)
		opts = append(opts,
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {r.task: kgo.NewOffset().At(at)}}),
			kgo.FetchMaxWait(500*time.Millisecond),
			kgo.MetadataMinAge(100*time.Millisecond),
		)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		r.cl = cl
	} else {
		// SetOffsets drops what was fetched beyond the previous range.
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {r.task: {Epoch: -1, Offset: at}}})
	}
	fctx, cancel := context.WithTimeout(ctx, ckptFetchTimeout)
	defer cancel()
	for done := false; !done; {
		fs := r.cl.PollFetches(fctx)
		if err := fctx.Err(); err != nil {
			return fmt.Errorf("read %s/%d offsets %d-%d: %w", topic, r.task, at, to-1, err)
		}
		for _, fe := range fs.Errors() {
			var loss *kgo.ErrDataLoss // records deleted under us: what is left is read
			if !errors.As(fe.Err, &loss) {
				return fmt.Errorf("read %s/%d offsets %d-%d: %w", topic, r.task, at, to-1, fe.Err)
			}
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Topic != topic || rec.Partition != r.task {
				return
			}
			if rec.Offset >= at && rec.Offset < to {
				r.recs[rec.Offset] = rec
			}
			// Offsets of a partition without transactions have no gaps,
			// and a reset past deleted records lands after at.
			if rec.Offset >= to-1 {
				done = true
			}
		})
	}
	r.from = at
	return nil
}

func (r *ckptTail) get(off int64) *kgo.Record { return r.recs[off] }

// forget drops the records from off on, which the backward walk is done with.
func (r *ckptTail) forget(off int64) {
	for o := range r.recs {
		if o >= off {
			delete(r.recs, o)
		}
	}
}

// assemble joins the chunks at first..last, which share the header h, and
// decodes them.
func (r *ckptTail) assemble(first, last int64, h ckptChunkHeader) (*state.Snapshot, error) {
	var n int64
	for o := first; o <= last; o++ {
		n += int64(len(r.recs[o].Value))
	}
	if n != h.length {
		return nil, fmt.Errorf("%w: snapshot seq %d: its chunks hold %d bytes, the header says %d", state.ErrCorrupt, h.seq, n, h.length)
	}
	b := make([]byte, 0, n)
	for o := first; o <= last; o++ {
		b = append(b, r.recs[o].Value...)
	}
	s, err := state.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot seq %d: %w", h.seq, err)
	}
	if s.Task != h.task || s.Seq != h.seq {
		return nil, fmt.Errorf("%w: records of task %d seq %d hold task %d seq %d", state.ErrCorrupt, h.task, h.seq, s.Task, s.Seq)
	}
	return s, nil
}

func (r *ckptTail) close() {
	if r.cl != nil {
		r.cl.Close()
	}
}
