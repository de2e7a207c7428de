package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vigil-cep/vigil/state"
)

func ckptBroker(t *testing.T) (*Broker, []string) {
	t.Helper()
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, []string{b.Addr()}
}

func ckptCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newCkptStore(t *testing.T, brokers []string, topic string, partitions int32, cfg CheckpointStoreConfig) *CheckpointStore {
	t.Helper()
	c, err := NewCheckpointStore(ckptCtx(t), brokers, topic, partitions, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// ckptSnap returns a snapshot whose sections hold about size random bytes,
// a function of task and seq.
func ckptSnap(task int32, seq uint64, size int) *state.Snapshot {
	rng := rand.New(rand.NewPCG(uint64(task), seq))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	half := size / 2
	return &state.Snapshot{
		Task:     task,
		Seq:      seq,
		Offsets:  map[string]int64{"in/" + strconv.Itoa(int(task)): int64(seq) * 10, "out": int64(seq)},
		Sections: map[string][]byte{"history": data[:half], "windows": data[half:]},
	}
}

// ckptCorruptions records the OnCorrupt calls.
type ckptCorruptions struct {
	mu    sync.Mutex
	where []string
	errs  []error
}

func (c *ckptCorruptions) record(where string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.where = append(c.where, where)
	c.errs = append(c.errs, err)
}

func (c *ckptCorruptions) take() ([]string, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, e := c.where, c.errs
	c.where, c.errs = nil, nil
	return w, e
}

// ckptWantChain checks that Chain of want[0].Task returns want, base first.
func ckptWantChain(t *testing.T, c *CheckpointStore, want ...*state.Snapshot) {
	t.Helper()
	task := want[0].Task
	got, err := c.Chain(ckptCtx(t), task)
	if err != nil {
		t.Fatalf("Chain(%d): %v", task, err)
	}
	seqs := func(ss []*state.Snapshot) (q []string) {
		for _, s := range ss {
			q = append(q, fmt.Sprintf("%d/%d", s.Seq, s.Parent))
		}
		return q
	}
	if len(got) != len(want) {
		t.Fatalf("Chain(%d) = seq/parent %v, want %v", task, seqs(got), seqs(want))
	}
	for i := range want {
		if g, w := state.Encode(got[i]), state.Encode(want[i]); !bytes.Equal(g, w) {
			t.Fatalf("Chain(%d) = seq/parent %v, want %v; element %d: %d bytes, want %d, or bytes differ",
				task, seqs(got), seqs(want), i, len(g), len(w))
		}
	}
}

func ckptBounds(t *testing.T, c *CheckpointStore, part int32) (start, end int64) {
	t.Helper()
	tr, err := c.newTail(ckptCtx(t), part)
	if err != nil {
		t.Fatal(err)
	}
	return tr.lo, tr.hi
}

// ckptProduceRaw writes records as they are, as a crashed or foreign writer
// would have left them.
func ckptProduceRaw(t *testing.T, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ckptCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// ckptReadAll reads a partition from its start to its end.
func ckptReadAll(t *testing.T, c *CheckpointStore, part int32) []*kgo.Record {
	t.Helper()
	lo, hi := ckptBounds(t, c, part)
	if lo == hi {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: {part: kgo.NewOffset().At(lo)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ckptCtx(t)
	var recs []*kgo.Record
	for len(recs) == 0 || recs[len(recs)-1].Offset < hi-1 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// ckptSeqsOn returns the seq headers present on a partition, in log order, without repeats.
func ckptSeqsOn(t *testing.T, c *CheckpointStore, part int32) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, r := range ckptReadAll(t, c, part) {
		h, err := parseCkptChunk(r)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if len(seqs) == 0 || seqs[len(seqs)-1] != h.seq {
			seqs = append(seqs, h.seq)
		}
	}
	return seqs
}

func TestCheckpointRoundTrip(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 1000
	c := newCkptStore(t, brokers, "ckpt.roundtrip", 4, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 100})
	ctx := ckptCtx(t)

	// Tasks 0-2 save concurrently; task 2's last snapshot takes 4 chunks.
	size := func(task int32, seq uint64) int { return 400*int(seq) + 700*int(task) }
	const saves = 5
	var wg sync.WaitGroup
	errs := make(chan error, 3*saves)
	for task := range int32(3) {
		wg.Go(func() {
			for seq := uint64(1); seq <= saves; seq++ {
				if err := c.Save(ctx, ckptSnap(task, seq, size(task, seq))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for task := range int32(3) {
		ckptWantChain(t, c, ckptSnap(task, saves, size(task, saves)))
		// The partition holds exactly the chunks of the task's snapshots.
		var n int64
		for seq := uint64(1); seq <= saves; seq++ {
			n += int64(len(ckptRecords(c.topic, ckptSnap(task, seq, size(task, seq)), chunk)))
		}
		if lo, hi := ckptBounds(t, c, task); hi-lo != n {
			t.Errorf("task %d: partition holds %d records, want %d chunks", task, hi-lo, n)
		}
	}
	if n := len(state.Encode(ckptSnap(2, saves, size(2, saves)))); n <= 3*chunk {
		t.Fatalf("test bug: the largest snapshot is %d bytes, not more than 3 chunks", n)
	}

	if _, err := c.Chain(ctx, 3); !errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of a task never saved: %v, want ErrNoSnapshot", err)
	}
	for _, seq := range []uint64{saves, 2} {
		if err := c.Save(ctx, ckptSnap(0, seq, 10)); !errors.Is(err, state.ErrStaleSeq) {
			t.Errorf("Save seq %d after seq %d: %v, want ErrStaleSeq", seq, saves, err)
		}
	}
	ckptWantChain(t, c, ckptSnap(0, saves, size(0, saves)))

	// A store that has neither saved nor restored task 0 takes its floor
	// from the partition.
	c2 := newCkptStore(t, brokers, "ckpt.roundtrip", 4, CheckpointStoreConfig{ChunkBytes: chunk})
	if err := c2.Save(ctx, ckptSnap(0, saves, 10)); !errors.Is(err, state.ErrStaleSeq) {
		t.Errorf("a second store saving seq %d: %v, want ErrStaleSeq", saves, err)
	}
	if err := c2.Save(ctx, ckptSnap(0, saves+1, 10)); err != nil {
		t.Fatal(err)
	}
	ckptWantChain(t, c, ckptSnap(0, saves+1, 10))

	// Task 4 has no partition.
	err := c.Save(ctx, ckptSnap(4, 1, 10))
	if err == nil || !strings.Contains(err.Error(), "has 4 partitions") {
		t.Errorf("Save of task 4 on 4 partitions: %v, want an error about the partition count", err)
	}
	if _, err := c.Chain(ctx, 4); err == nil || errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of task 4 on 4 partitions: %v, want an error about the partition count", err)
	}
}

// TestCheckpointDefaultChunks saves a snapshot larger than three default
// chunks, and so than the broker's 1 MiB message limit.
func TestCheckpointDefaultChunks(t *testing.T) {
	_, brokers := ckptBroker(t)
	c := newCkptStore(t, brokers, "ckpt.big", 1, CheckpointStoreConfig{})
	s := ckptSnap(0, 7, 3*DefaultChunkBytes+100<<10)
	if err := c.Save(ckptCtx(t), s); err != nil {
		t.Fatal(err)
	}
	if lo, hi := ckptBounds(t, c, 0); hi-lo != 4 {
		t.Errorf("%d records, want 4 chunks", hi-lo)
	}
	ckptWantChain(t, c, s)
}

func TestCheckpointTornTail(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.torn", 3, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	ctx := ckptCtx(t)
	for seq := uint64(1); seq <= 2; seq++ {
		if err := c.Save(ctx, ckptSnap(0, seq, 1700)); err != nil {
			t.Fatal(err)
		}
	}
	// expectSkips checks the OnCorrupt calls since the last check: n of
	// them, the first (the newest records) about contains.
	expectSkips := func(n int, contains string) {
		t.Helper()
		where, errs := bad.take()
		if len(errs) != n {
			t.Fatalf("OnCorrupt called %d times (%v: %v), want %d", len(errs), where, errs, n)
		}
		for i, err := range errs {
			if !errors.Is(err, state.ErrCorrupt) || (i == 0 && !strings.Contains(err.Error(), contains)) || !strings.HasPrefix(where[i], topic+"/") {
				t.Errorf("OnCorrupt(%q, %v), want an ErrCorrupt about %q", where[i], err, contains)
			}
		}
	}

	// A crash after the first two chunks of seq 3.
	recs := ckptRecords(topic, ckptSnap(0, 3, 1700), chunk)
	if len(recs) != 4 {
		t.Fatalf("test bug: %d chunks, want 4", len(recs))
	}
	_, end := ckptBounds(t, c, 0)
	ckptProduceRaw(t, brokers, recs[:2]...)
	ckptWantChain(t, c, ckptSnap(0, 2, 1700))
	expectSkips(1, "incomplete snapshot seq 3: chunks 0-1 of 4")
	if where := fmt.Sprintf("%s/0@%d-%d", topic, end, end+1); !slices.Contains(ckptReportedWhere(t, c), where) {
		t.Errorf("the torn run is not reported at %s", where)
	}

	// Restored at seq 2, the task saves seq 3 again, after the torn run.
	if err := c.Save(ctx, ckptSnap(0, 3, 1700)); err != nil {
		t.Fatal(err)
	}
	ckptWantChain(t, c, ckptSnap(0, 3, 1700))
	expectSkips(0, "")

	// A complete seq 4 with a flipped byte in its second chunk.
	recs = ckptRecords(topic, ckptSnap(0, 4, 1700), chunk)
	recs[1].Value = bytes.Clone(recs[1].Value)
	recs[1].Value[17] ^= 0x40
	ckptProduceRaw(t, brokers, recs...)
	ckptWantChain(t, c, ckptSnap(0, 3, 1700))
	expectSkips(1, "checksum mismatch")

	// A chunk missing in the middle: chunks 0, 1 and 3 of seq 5.
	recs = ckptRecords(topic, ckptSnap(0, 5, 1700), chunk)
	ckptProduceRaw(t, brokers, recs[0], recs[1], recs[3])
	ckptWantChain(t, c, ckptSnap(0, 3, 1700))
	expectSkips(3, "incomplete snapshot seq 5: chunks 3-3 of 4") // and 0-1, and seq 4

	// A record that is no chunk at all.
	ckptProduceRaw(t, brokers, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("hello")})
	ckptWantChain(t, c, ckptSnap(0, 3, 1700))
	expectSkips(4, "not a checkpoint chunk") // and the three runs before it

	// A partition with nothing but a torn run has no snapshot; one whose
	// only complete snapshot is corrupt has no readable snapshot.
	recs = ckptRecords(topic, ckptSnap(1, 1, 1700), chunk)
	ckptProduceRaw(t, brokers, recs[:3]...)
	if _, err := c.Chain(ctx, 1); !errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of a task with a torn run only: %v, want ErrNoSnapshot", err)
	}
	expectSkips(1, "incomplete")
	recs = ckptRecords(topic, ckptSnap(2, 1, 1700), chunk)
	recs[3].Value = bytes.Clone(recs[3].Value[:len(recs[3].Value)-1])
	ckptProduceRaw(t, brokers, recs...)
	if _, err := c.Chain(ctx, 2); !errors.Is(err, state.ErrCorrupt) || errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of a task with a corrupt snapshot only: %v, want ErrCorrupt", err)
	}
	expectSkips(1, "bytes, the header says")
	// After that the task may start over from any Seq.
	if err := c.Save(ctx, ckptSnap(2, 1, 100)); err != nil {
		t.Fatal(err)
	}
	ckptWantChain(t, c, ckptSnap(2, 1, 100))
}

// ckptReportedWhere runs Chain of task 0 with a fresh store on c's topic and
// returns where it skipped records.
func ckptReportedWhere(t *testing.T, c *CheckpointStore) []string {
	t.Helper()
	var bad ckptCorruptions
	c2 := newCkptStore(t, c.brokers, c.topic, 1, CheckpointStoreConfig{OnCorrupt: bad.record})
	if _, err := c2.Chain(ckptCtx(t), 0); err != nil {
		t.Fatal(err)
	}
	where, _ := bad.take()
	return where
}

func TestCheckpointKeep(t *testing.T) {
	b, brokers := ckptBroker(t)
	const chunk, keep = 400, 3
	c := newCkptStore(t, brokers, "ckpt.keep", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: keep})
	ctx := ckptCtx(t)
	size := func(seq uint64) int { return 150 * int(seq%9) } // 1 to 4 chunks
	var firsts []int64                                       // first offset of each seq
	for seq := uint64(1); seq <= 10; seq++ {
		_, end := ckptBounds(t, c, 0)
		firsts = append(firsts, end)
		if err := c.Save(ctx, ckptSnap(0, seq, size(seq))); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := ckptSeqsOn(t, c, 0), []uint64{8, 9, 10}; !slices.Equal(got, want) {
		t.Errorf("after 10 saves with Keep(%d) the partition holds seqs %v, want %v", keep, got, want)
	}
	if lo, _ := ckptBounds(t, c, 0); lo != firsts[7] {
		t.Errorf("the partition starts at %d, want %d (the first chunk of seq 8)", lo, firsts[7])
	}
	ckptWantChain(t, c, ckptSnap(0, 10, size(10)))

	// A restarted process restores seq 10 (a chain of one base) and keeps
	// the older ones until it has saved Keep bases of its own.
	c2 := newCkptStore(t, brokers, "ckpt.keep", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: keep})
	ckptWantChain(t, c2, ckptSnap(0, 10, size(10)))
	for seq := uint64(11); seq <= 12; seq++ {
		if err := c2.Save(ctx, ckptSnap(0, seq, size(seq))); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := ckptSeqsOn(t, c2, 0), []uint64{8, 9, 10, 11, 12}; !slices.Equal(got, want) {
		t.Errorf("after a restore and 2 saves the partition holds seqs %v, want %v", got, want)
	}

	// A failed deletion: the snapshot counts as saved.
	b.Cluster().ControlKey(int16(kmsg.DeleteRecords), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.DeleteRecordsRequest)
		resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewDeleteRecordsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewDeleteRecordsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.PolicyViolation.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	err := c2.Save(ctx, ckptSnap(0, 13, size(13)))
	var pe *state.PruneError
	if !errors.As(err, &pe) || !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("Save with DeleteRecords failing: %v, want a *state.PruneError", err)
	}
	ckptWantChain(t, c, ckptSnap(0, 13, size(13)))
	if got, want := ckptSeqsOn(t, c2, 0), []uint64{8, 9, 10, 11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("after a failed deletion the partition holds seqs %v, want %v", got, want)
	}
	// The next Save deletes what the failed one left.
	if err := c2.Save(ctx, ckptSnap(0, 14, size(14))); err != nil {
		t.Fatal(err)
	}
	if got, want := ckptSeqsOn(t, c2, 0), []uint64{12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("after the next save the partition holds seqs %v, want %v", got, want)
	}
	ckptWantChain(t, c2, ckptSnap(0, 14, size(14)))
}

func TestCheckpointTwoStores(t *testing.T) {
	_, brokers := ckptBroker(t)
	const topic = "ckpt.shared"
	a := newCkptStore(t, brokers, topic, 2, CheckpointStoreConfig{ChunkBytes: 300})
	b := newCkptStore(t, brokers, topic, 2, CheckpointStoreConfig{ChunkBytes: 700})
	ctx := ckptCtx(t)
	for seq := uint64(1); seq <= 3; seq++ {
		if err := a.Save(ctx, ckptSnap(0, seq, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Save(ctx, ckptSnap(1, 1, 50)); err != nil {
		t.Fatal(err)
	}
	// Partition 0 moves from a to b.
	ckptWantChain(t, b, ckptSnap(0, 3, 1000))
	ckptWantChain(t, b, ckptSnap(1, 1, 50))
	if err := b.Save(ctx, ckptSnap(0, 4, 1500)); err != nil {
		t.Fatal(err)
	}
	// And back.
	ckptWantChain(t, a, ckptSnap(0, 4, 1500))
	if err := a.Save(ctx, ckptSnap(0, 4, 10)); !errors.Is(err, state.ErrStaleSeq) {
		t.Errorf("Save of seq 4 after restoring seq 4: %v, want ErrStaleSeq", err)
	}
	if err := a.Save(ctx, ckptSnap(0, 5, 10)); err != nil {
		t.Fatal(err)
	}
	ckptWantChain(t, b, ckptSnap(0, 5, 10))

	// A store for more tasks than the topic has partitions works for the
	// tasks that have one.
	c := newCkptStore(t, brokers, topic, 5, CheckpointStoreConfig{})
	ckptWantChain(t, c, ckptSnap(1, 1, 50))
	err := c.Save(ctx, ckptSnap(3, 1, 10))
	if err == nil || !strings.Contains(err.Error(), "has 2 partitions") || !strings.Contains(err.Error(), "task 3") {
		t.Errorf("Save of task 3 on a 2-partition topic: %v, want an error about the partition count", err)
	}
}

func TestCheckpointStoreTopic(t *testing.T) {
	_, brokers := ckptBroker(t)
	ctx := ckptCtx(t)
	c := newCkptStore(t, brokers, "ckpt.other", 3, CheckpointStoreConfig{})
	if n, ok, err := c.partitionCount(ctx); err != nil || !ok || n != 3 {
		t.Errorf("the created topic has %d partitions (exists %v, %v), want 3", n, ok, err)
	}
	rcs, err := c.adm.DescribeTopicConfigs(ctx, c.topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
	for _, rc := range rcs {
		for _, kv := range rc.Configs {
			if w, ok := want[kv.Key]; ok {
				if kv.Value == nil || *kv.Value != w {
					t.Errorf("topic config %s = %v, want %s", kv.Key, kv.Value, w)
				}
				delete(want, kv.Key)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("topic configs missing: %v", want)
	}

	compact := "compact"
	if _, err := c.adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "ckpt.compacted"); err != nil {
		t.Fatal(err)
	}
	_, err = NewCheckpointStore(ctx, brokers, "ckpt.compacted", 1, CheckpointStoreConfig{})
	if err == nil || !strings.Contains(err.Error(), "cleanup.policy") {
		t.Errorf("NewCheckpointStore on a compacted topic: %v, want an error about cleanup.policy", err)
	}
	if _, err := NewCheckpointStore(ctx, brokers, "ckpt.x", 1, CheckpointStoreConfig{Keep: -1}); err == nil {
		t.Error("Keep -1 accepted")
	}
}

// TestCheckpointChainReadsTail checks that Chain reads the newest
// snapshot's records, not the partition from its start.
func TestCheckpointChainReadsTail(t *testing.T) {
	b, brokers := ckptBroker(t)
	const chunk = 300
	c := newCkptStore(t, brokers, "ckpt.tail", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 1000})
	ctx := ckptCtx(t)
	var last int64
	for seq := uint64(1); seq <= 40; seq++ {
		_, last = ckptBounds(t, c, 0)
		if err := c.Save(ctx, ckptSnap(0, seq, 100*int(seq%7))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	lowest := int64(-1)
	b.Cluster().ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if lowest < 0 || rp.FetchOffset < lowest {
					lowest = rp.FetchOffset
				}
			}
		}
		return nil, nil, false
	})
	c2 := newCkptStore(t, brokers, "ckpt.tail", 1, CheckpointStoreConfig{})
	ckptWantChain(t, c2, ckptSnap(0, 40, 100*(40%7)))
	mu.Lock()
	defer mu.Unlock()
	if lowest < last {
		t.Errorf("Chain fetched from offset %d; the newest snapshot starts at %d", lowest, last)
	}
}
