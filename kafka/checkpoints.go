package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	ckptHdrParent = "parent" // the snapshot's Parent; absent (chunks written before deltas existed) = 0
	ckptHdrChunk  = "chunk"  // index of this chunk, 0 .. chunks-1
	ckptHdrChunks = "chunks" // number of chunks of the snapshot
	ckptHdrLength = "length" // length of the whole encoding, in bytes
)

const (
	// ckptChunkOverhead bounds the bytes a chunk record adds to its value:
	// batch framing, record framing and the six headers.
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
	// Keep is how many chains (a base and the deltas saved on it) per task
	// Save keeps (default state.DefaultKeep; negative is refused). Keep at
	// least 2 so that a corrupt base still leaves a chain to fall back to.
	Keep int
	// OnCorrupt, if set, is called by Chain for each record or group of
	// records it skips: where names them ("topic/partition@first-last"), err
	// wraps state.ErrCorrupt or is a *state.VersionError. A delta whose
	// parent is missing is reported as well; the deltas built on a reported
	// snapshot are skipped without a report of their own. It runs on the
	// goroutine calling Chain while the task is locked, newest records
	// first: it must not call the store for the same task.
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
// # Chains
//
// A snapshot is either a base (Parent 0: complete in itself) or a delta on
// the snapshot whose Seq is its Parent. A task restores from a chain: a base
// followed by the deltas saved on it, each delta's Parent being the Seq of
// the element before it. Save appends to the task's chain (a delta must
// build on the task's latest snapshot) or starts a new one (a base); Chain
// returns the newest chain that can be restored in full.
//
// # Record layout
//
// Save encodes a snapshot with state.Encode (which ends in a CRC-32C of the
// rest, and carries Parent) and splits the bytes into chunks of at most
// ChunkBytes. Chunk i of n is one record on partition Task, produced in
// order, with no key, the chunk as value, and the headers task, seq, parent,
// chunk (i), chunks (n) and length (of the whole encoding), all decimal. A
// snapshot is complete when its n chunks sit at n consecutive offsets with
// indexes 0 .. n-1 and the same task, seq, parent, chunks and length
// headers; it is only there once its last chunk is. Chunks written before
// deltas existed have no parent header: they are read as bases.
//
// Save waits for every chunk to be acknowledged by all in-sync replicas (the
// producer is idempotent, so a retried chunk is neither doubled nor
// reordered). A Save interrupted by a crash or an error leaves a torn run of
// chunks without its last one, which Chain skips.
//
// # Finding the chain
//
// Chain lists the partition's start and end offsets and reads backwards from
// the end, never from the start: it reads the last record, whose chunk
// header says how many records before it belong to the same snapshot, then
// exactly those, then the record before them, guessing that the previous
// snapshot has as many chunks as the one just read. A snapshot verifies
// when it is complete, decodes with state.Decode (CRC included) and holds
// the task, seq and parent of its headers. The parent of a delta is the
// nearest complete snapshot further back whose seq is the delta's Parent
// (a torn run is a failed save, never a parent). Chain returns the newest
// snapshot that verifies and whose ancestors all verify, with those
// ancestors, base first; it reads each record at most once, and stops at
// that base. So a torn or corrupt newest delta falls back to the chain ending at
// its parent, a corrupt delta in the middle of a chain to the part of the
// chain before it, and a corrupt (or deleted) base to an older chain. Every
// torn run, foreign record and corrupt snapshot met on the way, and every
// delta whose parent is missing, is reported to OnCorrupt and skipped, and
// so are (without a report) the deltas built on them.
//
// Chain reads only what is committed, so that chunks written in Kafka
// transactions (by a task's transactional producer) count once their
// transaction commits, and never if it aborts. The end it reads from is the
// partition's last stable offset: the records of a transaction still open
// lie after it, and are neither read nor waited for. It reads with the
// read_committed isolation level, which drops the records of aborted
// transactions, and keeps the commit and abort markers, so that a read
// knows it has reached the end of its range when that ends with a marker.
// Markers and aborted records leave gaps in the offsets the walk sees:
// they are no snapshot's records, and are passed over without a report.
// The chunks of a committed snapshot still sit at consecutive offsets (a
// transaction produces them together, followed by its marker). On a
// partition without transactions the last stable offset is the end of the
// partition, and there are no gaps.
//
// # Trimming
//
// After a successful Save, the store deletes (kadm DeleteRecords) the
// records before the first chunk of the Keep-th newest base it knows of:
// the ones it saved itself and the base of the chain Chain returned. Every
// record of the newest Keep chains, and whatever lies between them, is kept;
// a chain is never cut in the middle. A process that has just restored a
// task therefore keeps a few more than Keep chains until it has saved Keep-1
// bases of its own. The topic is created with cleanup.policy=delete and no
// time or size retention, so that only these deletions remove snapshots (an
// idle task keeps its checkpoint forever). A failed deletion is returned as
// a *state.PruneError: the snapshot counts as saved, and the next Save tries
// the deletion again.
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
// snapshot that is older in content but newer on the log, which Chain would
// return. Deployments that cannot rule out zombies need a fence in front of
// Save, for example a transactional producer per task: the transactions of
// a fenced zombie are aborted, and Chain does not see them.
//
// # Concurrency and sequence rules
//
// A CheckpointStore is safe for concurrent use: calls for different tasks
// run in parallel on one shared producer client (each Chain reads through
// a consumer client of its own); calls for the same task are serialised by a
// per-task lock. The task's latest Seq is the one this store last saved or
// the last element of the chain Chain last returned, or, before either, the
// seq header of the last committed chunk on the partition (torn or not;
// chunks of aborted or open transactions do not count). A Save's Seq
// must exceed it (state.ErrStaleSeq otherwise), and a delta's Parent must
// equal it (state.ErrBrokenChain otherwise; after Chain found nothing to
// restore, only a base can be saved).
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
	known bool   // has and seq were set by a Save or Chain of this store
	has   bool   // the task has a snapshot to build on
	seq   uint64 // the task's latest Seq, if has
	// starts holds the first offsets of the newest bases this store knows
	// of (the chains' first records), oldest first: at most Keep after a
	// successful prune.
	starts []int64
}

// NewCheckpointStore returns a store on topic, creating the topic when it is
// missing with partitions partitions (the task count), cleanup.policy=delete
// and unlimited retention. An existing topic is used as it is; a compacted
// one is refused. If it has fewer partitions than a task needs, Save and
// Chain fail for that task with an error saying so. Close releases the
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
	c := &CheckpointStore{brokers: brokers, topic: topic, cfg: cfg}
	cl, err := kgo.NewClient(append(opts, c.producerOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store %s: %w", topic, err)
	}
	c.cl, c.adm = cl, kadm.NewClient(cl)
	c.mu.tasks = make(map[int32]*ckptTask)
	n, err := c.ensureTopic(ctx, partitions)
	if err != nil {
		cl.Close()
		return nil, err
	}
	c.mu.partitions = n
	return c, nil
}

// producerOpts are the options a client producing the store's chunks
// needs (SaveIn).
func (c *CheckpointStore) producerOpts() []kgo.Opt {
	if need := c.cfg.ChunkBytes + ckptChunkOverhead; need > ckptKgoBatchBytes {
		return []kgo.Opt{kgo.ProducerBatchMaxBytes(int32(need))}
	}
	return nil
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
// chains it knows of. A base (s.Parent 0) starts a new chain; a delta
// extends the task's chain. s.Seq must be above the task's latest Seq
// (state.ErrStaleSeq otherwise), and the Parent of a delta must equal that
// latest Seq: the one this store last saved or last returned at the end of
// a chain from Chain, or, before either, the seq header of the partition's
// last chunk (an error wrapping state.ErrBrokenChain otherwise, also when
// the task has no snapshot to build on). A refused Save writes nothing. A
// *state.PruneError means s was saved. On any other error s may have left a
// torn run of chunks, which Chain skips; the latest Seq is then unchanged.
// Save does not keep s.
func (c *CheckpointStore) Save(ctx context.Context, s *state.Snapshot) error {
	return c.save(ctx, c.cl, s, true)
}

// SaveIn saves s as Save does, but produces its chunks through cl, a
// transactional client with a transaction open (exactly-once delivery,
// docs/design.md "Exactly-once"), and does not prune. s is on the log only
// if that transaction commits, yet it counts as the task's latest snapshot
// from now on: the caller commits before it saves again, and stops the task
// if the commit fails. Older chains must stay until the commit, so the
// caller calls Prune after it.
func (c *CheckpointStore) SaveIn(ctx context.Context, cl *kgo.Client, s *state.Snapshot) error {
	return c.save(ctx, cl, s, false)
}

// Prune deletes the task's records before the newest Keep chains the store
// knows of, as Save does after a snapshot (a *state.PruneError on failure).
func (c *CheckpointStore) Prune(ctx context.Context, task int32) error {
	t := c.task(task)
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.prune(ctx, task, t)
}

// save is Save through producer cl, pruning after it when prune is set.
func (c *CheckpointStore) save(ctx context.Context, cl *kgo.Client, s *state.Snapshot, prune bool) error {
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
	if s.Parent != 0 && !t.has {
		return fail(fmt.Errorf("%w: a delta on seq %d, but the task has no snapshot to build on: save a base",
			state.ErrBrokenChain, s.Parent))
	}
	if s.Parent != 0 && s.Parent != t.seq {
		return fail(fmt.Errorf("%w: a delta on seq %d, but the latest is %d", state.ErrBrokenChain, s.Parent, t.seq))
	}
	recs := ckptRecords(c.topic, s, c.cfg.ChunkBytes)
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return fail(err)
	}
	first, last := res[0].Record.Offset, res[len(res)-1].Record.Offset
	if last-first != int64(len(recs)-1) {
		return fail(fmt.Errorf("its %d chunks landed at offsets %d-%d, interleaved with other records: "+
			"is another process saving task %d?", len(recs), first, last, s.Task))
	}
	t.has, t.seq = true, s.Seq
	if s.Parent == 0 {
		t.starts = append(t.starts, first)
	}
	if !prune {
		return nil
	}
	return c.prune(ctx, s.Task, t)
}

// ckptRecords splits the encoding of s into chunk records for partition
// s.Task of topic.
func ckptRecords(topic string, s *state.Snapshot, chunkBytes int) []*kgo.Record {
	b := state.Encode(s)
	n := max(1, (len(b)+chunkBytes-1)/chunkBytes)
	task := strconv.FormatInt(int64(s.Task), 10)
	seq := strconv.FormatUint(s.Seq, 10)
	parent := strconv.FormatUint(s.Parent, 10)
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
				{Key: ckptHdrParent, Value: []byte(parent)},
				{Key: ckptHdrChunk, Value: []byte(strconv.Itoa(i))},
				{Key: ckptHdrChunks, Value: []byte(chunks)},
				{Key: ckptHdrLength, Value: []byte(length)},
			},
		}
	}
	return recs
}

// prune deletes the task's records before the first chunk of the Keep-th
// newest base in t.starts. Only a successful deletion drops the older bases
// from t.starts, so that the next Save, base or delta, tries again.
func (c *CheckpointStore) prune(ctx context.Context, task int32, t *ckptTask) error {
	if len(t.starts) <= c.cfg.Keep {
		return nil
	}
	cut := t.starts[len(t.starts)-c.cfg.Keep]
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
	t.starts = append(t.starts[:0], t.starts[len(t.starts)-c.cfg.Keep:]...)
	return nil
}

// Chain returns the task's newest restorable chain, base first: the newest
// snapshot that verifies (complete, decodes and verifies, and holds the
// task, seq and parent of its headers) and whose ancestors all verify, each
// found further back on the partition as the nearest complete snapshot whose
// Seq is the Parent of the one after it, down to a base. It reads the
// partition backwards from its last stable offset, each record once, and
// stops at the chain's base. It sees committed records only: the chunks of
// aborted transactions and of transactions still open are not there for
// it, and the transaction markers are passed over, all without a report.
// Each run of records it skips on the way (a torn save, a corrupt chunk or
// snapshot, a record that is no chunk, a delta whose parent is missing) is
// reported to OnCorrupt; the deltas built on one are skipped without a
// report of their own. So a torn or corrupt newest delta yields the chain
// ending at its parent, a corrupt delta in the middle the chain before it,
// and a corrupt base an older chain.
//
// It returns state.ErrNoSnapshot if the partition holds no complete
// snapshot, an error wrapping state.ErrCorrupt if it holds some but none
// makes a restorable chain; the task may then save a base with any Seq. The
// snapshots and their sections are the caller's.
func (c *CheckpointStore) Chain(ctx context.Context, task int32) ([]*state.Snapshot, error) {
	fail := func(err error) error {
		return fmt.Errorf("checkpoint store %s: chain of task %d: %w", c.topic, task, err)
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
	where := func(first, last int64) string {
		w := fmt.Sprintf("%s/%d@%d", c.topic, task, first)
		if last != first {
			w += "-" + strconv.FormatInt(last, 10)
		}
		return w
	}
	// The reports are made on return, newest records first: that a delta's
	// parent is missing is only known once the partition is read to its
	// start.
	var reports []ckptReport
	report := func(first, last int64, err error) {
		reports = append(reports, ckptReport{first, last, err})
	}
	defer func() {
		if c.cfg.OnCorrupt == nil {
			return
		}
		slices.SortStableFunc(reports, func(a, b ckptReport) int { return cmp.Compare(b.first, a.first) })
		for _, r := range reports {
			c.cfg.OnCorrupt(where(r.first, r.last), r.err)
		}
	}()
	var nodes []*ckptNode                   // the snapshots that verify, newest first
	waiting := make(map[uint64][]*ckptNode) // deltas by the Seq of the parent they wait for
	head := 0                               // nodes[:head] have broken chains
	// winner returns the chain of the newest node whose chain is not
	// known to be broken, once that chain is whole.
	winner := func() []*ckptNode {
		for ; head < len(nodes); head++ {
			if chain, broken := nodes[head].resolve(); !broken {
				return chain // nil while an ancestor is still looked for
			}
		}
		return nil
	}
	var chain []*ckptNode
	guess := int64(1) // records to read at once when nothing says how many
	complete := 0     // complete snapshots found
	for pos := tr.hi - 1; pos >= tr.lo && chain == nil; {
		if err := ctx.Err(); err != nil {
			return nil, fail(err)
		}
		if err := tr.fetch(ctx, pos-guess+1); err != nil {
			return nil, fail(err)
		}
		r := tr.get(pos)
		if r == nil { // a transaction marker, an aborted record, or deleted while we read
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
			if err != nil || ph.task != h.task || ph.seq != h.seq || ph.parent != h.parent || ph.chunks != h.chunks ||
				ph.length != h.length || ph.chunk != h.chunk-int(pos-start+1) {
				break
			}
			start--
		}
		first := h.chunk - int(pos-start) // index of the chunk at start
		if first != 0 || h.chunk != h.chunks-1 {
			// A failed save: no delta builds on it.
			report(start, pos, fmt.Errorf("%w: incomplete snapshot seq %d: chunks %d-%d of %d "+
				"(a save interrupted before its last chunk, or chunks missing)", state.ErrCorrupt, h.seq, first, h.chunk, h.chunks))
		} else {
			complete++
			// This is the parent of the deltas waiting for its seq, whether
			// it verifies or not. If it does not, their chains break here,
			// and only this run is reported.
			waiters := waiting[h.seq]
			delete(waiting, h.seq)
			s, err := tr.assemble(start, pos, h)
			if err != nil {
				report(start, pos, err)
				for _, w := range waiters {
					w.broken = true
				}
			} else {
				n := &ckptNode{s: s, first: start, last: pos}
				for _, w := range waiters {
					w.parent = n
				}
				if s.Parent != 0 {
					waiting[s.Parent] = append(waiting[s.Parent], n)
				}
				nodes = append(nodes, n)
				if s.Parent == 0 {
					chain = winner() // only a base can complete a chain
				}
			}
		}
		tr.forget(start)
		pos = start - 1
		guess = min(int64(h.chunks), 256) // the previous snapshot is likely as large
	}
	if chain == nil {
		// The whole partition was read: the parents still looked for are
		// not on it, and the chains break at the deltas that need them.
		for seq, ws := range waiting {
			for _, w := range ws {
				w.broken = true
				report(w.first, w.last, fmt.Errorf("%w: parent seq %d of snapshot seq %d is missing "+
					"(no complete snapshot of that seq before it on the partition)", state.ErrCorrupt, seq, w.s.Seq))
			}
		}
		chain = winner()
	}
	if chain == nil {
		// Whatever is on the partition cannot be restored, so a fresh start
		// may save a base with any Seq.
		t.known, t.has, t.starts = true, false, t.starts[:0]
		if complete > 0 {
			return nil, fail(fmt.Errorf("none of %d complete snapshots is in a chain that verifies: %w", complete, state.ErrCorrupt))
		}
		return nil, state.ErrNoSnapshot
	}
	snaps := make([]*state.Snapshot, len(chain))
	for i, n := range chain {
		snaps[i] = n.s
	}
	t.known, t.has, t.seq = true, true, snaps[len(snaps)-1].Seq
	t.starts = append(t.starts[:0], chain[0].first)
	return snaps, nil
}

// ckptReport is a run of records that Chain skips.
type ckptReport struct {
	first, last int64
	err         error
}

// ckptNode is a snapshot that verifies, met by Chain's backward walk, with
// what the walk has learned of its ancestors.
type ckptNode struct {
	s           *state.Snapshot
	first, last int64     // the offsets of its records
	parent      *ckptNode // of a delta, once found
	broken      bool      // of a delta: its parent does not verify or is missing
}

// resolve returns n's chain, base first, if n and its ancestors all verify;
// broken if one of them has a parent that does not verify or is missing;
// neither while an ancestor is still looked for.
func (n *ckptNode) resolve() (chain []*ckptNode, broken bool) {
	for m := n; ; m = m.parent {
		chain = append(chain, m)
		switch {
		case m.s.Parent == 0:
			slices.Reverse(chain)
			return chain, false
		case m.broken:
			return nil, true
		case m.parent == nil:
			return nil, false
		}
	}
}

// lastSeq returns the seq header of the task's last committed chunk on the
// partition, complete or not; false if the partition holds none. Chunks of
// aborted or open transactions are not read, and markers are gaps.
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
	seq, parent   uint64
	chunk, chunks int
	length        int64
}

// parseCkptChunk reads the headers of a chunk record; an error wraps
// state.ErrCorrupt. A chunk written before deltas existed has no parent
// header: it reads as parent 0, a base.
func parseCkptChunk(r *kgo.Record) (ckptChunkHeader, error) {
	const (
		seenTask = 1 << iota
		seenSeq
		seenChunk
		seenChunks
		seenLength
		seenParent
		seenRequired = seenTask | seenSeq | seenChunk | seenChunks | seenLength
	)
	var h ckptChunkHeader
	var seen int
	var err error
	bad := func(key string, v []byte) {
		if err == nil {
			err = fmt.Errorf("%w: header %s=%q", state.ErrCorrupt, key, v)
		}
	}
	num := func(key string, v []byte, lo, hi int64) int64 {
		n, perr := strconv.ParseInt(string(v), 10, 64)
		if perr != nil || n < lo || n > hi {
			bad(key, v)
		}
		return n
	}
	unum := func(key string, v []byte) uint64 {
		n, perr := strconv.ParseUint(string(v), 10, 64)
		if perr != nil {
			bad(key, v)
		}
		return n
	}
	for _, kv := range r.Headers {
		var bit int
		switch kv.Key {
		case ckptHdrTask:
			bit, h.task = seenTask, int32(num(kv.Key, kv.Value, 0, 1<<31-1))
		case ckptHdrSeq:
			bit, h.seq = seenSeq, unum(kv.Key, kv.Value)
		case ckptHdrParent:
			bit, h.parent = seenParent, unum(kv.Key, kv.Value)
		case ckptHdrChunk:
			bit, h.chunk = seenChunk, int(num(kv.Key, kv.Value, 0, ckptMaxChunks-1))
		case ckptHdrChunks:
			bit, h.chunks = seenChunks, int(num(kv.Key, kv.Value, 1, ckptMaxChunks))
		case ckptHdrLength:
			bit, h.length = seenLength, num(kv.Key, kv.Value, 0, 1<<62)
		default:
			continue
		}
		if seen&bit != 0 && err == nil {
			err = fmt.Errorf("%w: header %s repeated", state.ErrCorrupt, kv.Key)
		}
		seen |= bit
	}
	switch {
	case err != nil:
		return h, err
	case seen&seenRequired != seenRequired:
		return h, fmt.Errorf("%w: not a checkpoint chunk (headers task, seq, chunk, chunks, length expected once each)", state.ErrCorrupt)
	case h.chunk >= h.chunks:
		return h, fmt.Errorf("%w: chunk %d of %d", state.ErrCorrupt, h.chunk, h.chunks)
	case !(&state.Snapshot{Seq: h.seq, Parent: h.parent}).ParentBelow():
		return h, fmt.Errorf("%w: seq %d on parent %d: a parent comes before", state.ErrCorrupt, h.seq, h.parent)
	}
	return h, nil
}

// ckptTail reads the committed records of one partition backwards: it
// fetches ranges ending where the previous one began, and keeps the data
// records until they are forgotten. An offset it holds no record for is a
// gap: a transaction marker, an aborted record, or a record deleted while
// it read.
type ckptTail struct {
	c      *CheckpointStore
	task   int32
	lo, hi int64 // the partition's start and last stable offsets when reading began
	from   int64 // records [from, hi) have been fetched
	recs   map[int64]*kgo.Record
	cl     *kgo.Client // created by the first fetch
}

func (c *CheckpointStore) newTail(ctx context.Context, task int32) (*ckptTail, error) {
	starts, err := c.adm.ListStartOffsets(ctx, c.topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	// The last stable offset, not the high watermark: what follows it is in
	// a transaction still open, which a read_committed fetch does not return
	// before the transaction ends.
	ends, err := c.adm.ListCommittedOffsets(ctx, c.topic)
	if err != nil {
		return nil, fmt.Errorf("list last stable offsets: %w", err)
	}
	lo, ok1 := starts.Lookup(c.topic, task)
	hi, ok2 := ends.Lookup(c.topic, task)
	switch {
	case !ok1 || !ok2:
		return nil, fmt.Errorf("no offsets listed for partition %d", task)
	case lo.Err != nil:
		return nil, fmt.Errorf("start offset of partition %d: %w", task, lo.Err)
	case hi.Err != nil:
		return nil, fmt.Errorf("last stable offset of partition %d: %w", task, hi.Err)
	}
	return &ckptTail{c: c, task: task, lo: lo.Offset, hi: hi.Offset, from: hi.Offset, recs: make(map[int64]*kgo.Record)}, nil
}

// fetch makes sure that the records from at (or the start) to the end have
// been read: the committed data records are kept, markers and aborted
// records are not.
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
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
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
			// The client returns records in offset order and drops only
			// aborted ones, so every offset below to has been read once a
			// record at to-1 or after it arrives, even if to-1 itself was
			// aborted: a record after it is returned all the same. For a
			// later range, to is where an earlier range began, whose read
			// returned a record at or after to, which this read returns
			// again (the client reads on past to). For the first range, to
			// is the last stable offset, and the record below it is
			// returned: a marker, a record outside transactions or one of a
			// committed transaction. It is aborted only if its transaction
			// aborted after another producer's, still open, began (two
			// transactional producers writing the partition at once); the
			// read then waits for that one to end, at most
			// ckptFetchTimeout. A reset past deleted records lands after at.
			if rec.Offset >= to-1 {
				done = true
			}
			if rec.Offset >= at && rec.Offset < to && !rec.Attrs.IsControl() {
				r.recs[rec.Offset] = rec
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
// decodes them; the snapshot must hold the task, seq and parent of h.
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
	if s.Task != h.task || s.Seq != h.seq || s.Parent != h.parent {
		return nil, fmt.Errorf("%w: records of task %d seq %d parent %d hold task %d seq %d parent %d",
			state.ErrCorrupt, h.task, h.seq, h.parent, s.Task, s.Seq, s.Parent)
	}
	return s, nil
}

func (r *ckptTail) close() {
	if r.cl != nil {
		r.cl.Close()
	}
}
