package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vigil-cep/vigil/state"
)

// ckptDelta is ckptSnap(task, seq, size) as a delta on parent.
func ckptDelta(task int32, seq, parent uint64, size int) *state.Snapshot {
	s := ckptSnap(task, seq, size)
	s.Parent = parent
	return s
}

// ckptSave saves snaps in order and fails the test on an error.
func ckptSave(t *testing.T, c *CheckpointStore, snaps ...*state.Snapshot) {
	t.Helper()
	for _, s := range snaps {
		if err := c.Save(ckptCtx(t), s); err != nil {
			t.Fatal(err)
		}
	}
}

// ckptFlip returns the chunk records of s with a byte flipped in chunk i:
// complete, but failing its checksum.
func ckptFlip(topic string, s *state.Snapshot, chunk, i int) []*kgo.Record {
	recs := ckptRecords(topic, s, chunk)
	recs[i].Value = bytes.Clone(recs[i].Value)
	recs[i].Value[len(recs[i].Value)/2] ^= 0x10
	return recs
}

// ckptExpectSkips checks the OnCorrupt calls since the last check: one per
// entry of contains, newest records first, the i-th about contains[i].
func ckptExpectSkips(t *testing.T, bad *ckptCorruptions, topic string, contains ...string) {
	t.Helper()
	where, errs := bad.take()
	if len(errs) != len(contains) {
		t.Fatalf("OnCorrupt called %d times (%v: %v), want %d about %q", len(errs), where, errs, len(contains), contains)
	}
	for i, err := range errs {
		if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), contains[i]) || !strings.HasPrefix(where[i], topic+"/") {
			t.Errorf("OnCorrupt(%q, %v), want an ErrCorrupt about %q", where[i], err, contains[i])
		}
	}
}

func TestCheckpointChain(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.chain", 2, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	b1, d2, d3 := ckptSnap(0, 1, 1700), ckptDelta(0, 2, 1, 300), ckptDelta(0, 3, 2, 1200)
	ckptSave(t, c, b1)
	ckptWantChain(t, c, b1)
	ckptSave(t, c, d2, d3)
	ckptWantChain(t, c, b1, d2, d3)

	// Every chunk carries the parent.
	for _, r := range ckptReadAll(t, c, 0) {
		h, err := parseCkptChunk(r)
		if err != nil {
			t.Fatal(err)
		}
		if want := max(h.seq, 1) - 1; h.parent != want {
			t.Errorf("offset %d: seq %d parent header %d, want %d", r.Offset, h.seq, h.parent, want)
		}
	}

	// A process that takes the task over restores the same chain and
	// extends it.
	c2 := newCkptStore(t, brokers, "ckpt.chain", 2, CheckpointStoreConfig{ChunkBytes: chunk})
	ckptWantChain(t, c2, b1, d2, d3)
	d4 := ckptDelta(0, 4, 3, 10)
	ckptSave(t, c2, d4)
	ckptWantChain(t, c, b1, d2, d3, d4)

	// A new base starts a new chain.
	b5, d6 := ckptSnap(0, 5, 900), ckptDelta(0, 6, 5, 100)
	ckptSave(t, c2, b5)
	ckptWantChain(t, c, b5)
	ckptSave(t, c2, d6)
	ckptWantChain(t, c, b5, d6)
	ckptExpectSkips(t, &bad, c.topic)

	// A chain on task 1 of a single base.
	ckptSave(t, c, ckptSnap(1, 7, 10))
	ckptWantChain(t, c2, ckptSnap(1, 7, 10))
}

func TestCheckpointChainTornDelta(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.chain.torn", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	b1, d2 := ckptSnap(0, 1, 1700), ckptDelta(0, 2, 1, 1700)
	ckptSave(t, c, b1, d2)

	// A crash after the first two chunks of delta 3.
	d3 := ckptDelta(0, 3, 2, 1700)
	recs := ckptRecords(topic, d3, chunk)
	if len(recs) != 4 {
		t.Fatalf("test bug: %d chunks, want 4", len(recs))
	}
	ckptProduceRaw(t, brokers, recs[:2]...)
	ckptWantChain(t, c, b1, d2)
	ckptExpectSkips(t, &bad, topic, "incomplete snapshot seq 3: chunks 0-1 of 4")

	// Restored at 2, the task saves delta 3 again, and then 4 on it.
	if err := c.Save(ckptCtx(t), ckptDelta(0, 3, 1, 10)); !errors.Is(err, state.ErrBrokenChain) {
		t.Errorf("a delta on 1 after restoring up to 2: %v, want ErrBrokenChain", err)
	}
	d4 := ckptDelta(0, 4, 3, 700)
	ckptSave(t, c, d3, d4)
	ckptWantChain(t, c, b1, d2, d3, d4)
	ckptExpectSkips(t, &bad, topic, "incomplete snapshot seq 3")

	// A torn base: the chain before it.
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptSnap(0, 5, 1700), chunk)[:3]...)
	ckptWantChain(t, c, b1, d2, d3, d4)
	ckptExpectSkips(t, &bad, topic, "incomplete snapshot seq 5", "incomplete snapshot seq 3")
}

func TestCheckpointChainCorruptMiddle(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.chain.middle", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	b1, d2 := ckptSnap(0, 1, 1200), ckptDelta(0, 2, 1, 800)
	ckptSave(t, c, b1, d2)
	// Delta 3 complete but corrupt, delta 4 on it sound, and a record that
	// is no chunk.
	ckptProduceRaw(t, brokers, ckptFlip(topic, ckptDelta(0, 3, 2, 1200), chunk, 1)...)
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptDelta(0, 4, 3, 600), chunk)...)
	ckptProduceRaw(t, brokers, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("hello")})

	// Delta 4 is skipped without a report of its own: its chain breaks at 3.
	c2 := newCkptStore(t, brokers, topic, 1, CheckpointStoreConfig{ChunkBytes: chunk, OnCorrupt: bad.record})
	ckptWantChain(t, c2, b1, d2)
	ckptExpectSkips(t, &bad, topic, "not a checkpoint chunk", "checksum mismatch")

	// The task resumes from 2: seq 3 again, on 2.
	if err := c2.Save(ckptCtx(t), ckptDelta(0, 5, 4, 10)); !errors.Is(err, state.ErrBrokenChain) {
		t.Errorf("a delta on the unrestorable 4: %v, want ErrBrokenChain", err)
	}
	d3 := ckptDelta(0, 3, 2, 400)
	ckptSave(t, c2, d3)
	ckptWantChain(t, c, b1, d2, d3)
	ckptExpectSkips(t, &bad, topic, "not a checkpoint chunk", "checksum mismatch")

	// A delta whose parent is on no record: reported, and the chain before it.
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptDelta(0, 9, 8, 100), chunk)...)
	ckptWantChain(t, c, b1, d2, d3)
	ckptExpectSkips(t, &bad, topic, "parent seq 8 of snapshot seq 9 is missing", "not a checkpoint chunk", "checksum mismatch")

	// A delta that claims another task, or whose parent header does not
	// match its encoding.
	d10 := ckptDelta(0, 10, 3, 100)
	recs := ckptRecords(topic, d10, chunk)
	for i, kv := range recs[0].Headers {
		if kv.Key == ckptHdrParent {
			recs[0].Headers[i].Value = []byte("2")
		}
	}
	ckptProduceRaw(t, brokers, recs...)
	ckptWantChain(t, c, b1, d2, d3)
	where, errs := bad.take()
	if len(errs) != 4 || !errors.Is(errs[0], state.ErrCorrupt) || !strings.Contains(errs[0].Error(), "parent 2 hold task 0 seq 10 parent 3") {
		t.Errorf("OnCorrupt calls %v: %v, want 4, the first about the parent header", where, errs)
	}
}

func TestCheckpointChainCorruptBase(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.chain.base", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	b1, d2 := ckptSnap(0, 1, 1200), ckptDelta(0, 2, 1, 800)
	ckptSave(t, c, b1, d2)
	// A newer chain whose base is corrupt, and whose newest delta is torn.
	ckptProduceRaw(t, brokers, ckptFlip(topic, ckptSnap(0, 3, 1500), chunk, 0)...)
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptDelta(0, 4, 3, 200), chunk)...)
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptDelta(0, 5, 4, 900), chunk)...)
	ckptProduceRaw(t, brokers, ckptRecords(topic, ckptDelta(0, 6, 5, 1200), chunk)[:2]...)

	c2 := newCkptStore(t, brokers, topic, 1, CheckpointStoreConfig{ChunkBytes: chunk, OnCorrupt: bad.record})
	ckptWantChain(t, c2, b1, d2)
	ckptExpectSkips(t, &bad, topic, "incomplete snapshot seq 6", "checksum mismatch")

	// With the older chain's base corrupt too, nothing restores, and the
	// task may start over with a base of any Seq, not a delta.
	c3 := newCkptStore(t, brokers, "ckpt.chain.base2", 1, CheckpointStoreConfig{ChunkBytes: chunk, OnCorrupt: bad.record})
	ckptProduceRaw(t, brokers, ckptFlip(c3.topic, ckptSnap(0, 1, 1200), chunk, 2)...)
	ckptProduceRaw(t, brokers, ckptRecords(c3.topic, ckptDelta(0, 2, 1, 200), chunk)...)
	if _, err := c3.Chain(ckptCtx(t), 0); !errors.Is(err, state.ErrCorrupt) || errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain with the only base corrupt: %v, want ErrCorrupt", err)
	}
	ckptExpectSkips(t, &bad, c3.topic, "checksum mismatch")
	if err := c3.Save(ckptCtx(t), ckptDelta(0, 3, 2, 10)); !errors.Is(err, state.ErrBrokenChain) {
		t.Errorf("a delta after no chain restored: %v, want ErrBrokenChain", err)
	}
	ckptSave(t, c3, ckptSnap(0, 1, 50))
	ckptWantChain(t, c3, ckptSnap(0, 1, 50))
	ckptExpectSkips(t, &bad, c3.topic)
}

func TestCheckpointChainBrokenSave(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	c := newCkptStore(t, brokers, "ckpt.chain.broken", 2, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20})
	ctx := ckptCtx(t)
	// refused checks that Save(s) fails with want and writes nothing.
	refused := func(c *CheckpointStore, s *state.Snapshot, want error) {
		t.Helper()
		_, before := ckptBounds(t, c, s.Task)
		if err := c.Save(ctx, s); !errors.Is(err, want) {
			t.Errorf("Save seq %d parent %d: %v, want %v", s.Seq, s.Parent, err, want)
		}
		if _, after := ckptBounds(t, c, s.Task); after != before {
			t.Errorf("a refused Save wrote %d records", after-before)
		}
	}
	refused(c, ckptDelta(0, 2, 1, 10), state.ErrBrokenChain) // nothing to build on
	ckptSave(t, c, ckptSnap(0, 1, 700), ckptDelta(0, 2, 1, 700))
	refused(c, ckptDelta(0, 3, 1, 10), state.ErrBrokenChain) // not on the latest
	refused(c, ckptDelta(0, 4, 3, 10), state.ErrBrokenChain) // on a seq never saved
	refused(c, ckptDelta(0, 2, 1, 10), state.ErrStaleSeq)
	ckptSave(t, c, ckptDelta(0, 3, 2, 10))

	// A store that knows nothing of the task builds on the partition's last
	// seq header.
	c2 := newCkptStore(t, brokers, "ckpt.chain.broken", 2, CheckpointStoreConfig{ChunkBytes: chunk})
	refused(c2, ckptDelta(0, 4, 2, 10), state.ErrBrokenChain)
	ckptSave(t, c2, ckptDelta(0, 4, 3, 10))
	ckptWantChain(t, c, ckptSnap(0, 1, 700), ckptDelta(0, 2, 1, 700), ckptDelta(0, 3, 2, 10), ckptDelta(0, 4, 3, 10))
	// After Chain, the last element is the latest.
	refused(c, ckptDelta(0, 5, 3, 10), state.ErrBrokenChain)
	ckptSave(t, c, ckptDelta(0, 5, 4, 10))
	// A Chain that finds nothing leaves only bases.
	if _, err := c.Chain(ctx, 1); !errors.Is(err, state.ErrNoSnapshot) {
		t.Fatalf("Chain of an empty partition: %v, want ErrNoSnapshot", err)
	}
	refused(c, ckptDelta(1, 2, 1, 10), state.ErrBrokenChain)
	ckptSave(t, c, ckptSnap(1, 2, 10), ckptDelta(1, 3, 2, 10))
	ckptWantChain(t, c2, ckptSnap(1, 2, 10), ckptDelta(1, 3, 2, 10))
}

func TestCheckpointChainKeep(t *testing.T) {
	b, brokers := ckptBroker(t)
	const chunk, keep = 400, 2
	c := newCkptStore(t, brokers, "ckpt.chain.keep", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: keep})
	ctx := ckptCtx(t)
	size := func(seq uint64) int { return 150 * int(seq%9) } // 1 to 4 chunks
	firsts := map[uint64]int64{}                             // first offset of each seq
	// Bases at 1, 4, 6, 9, 10; deltas between.
	snap := func(seq uint64) *state.Snapshot {
		switch seq {
		case 1, 4, 6, 9, 10:
			return ckptSnap(0, seq, size(seq))
		}
		return ckptDelta(0, seq, seq-1, size(seq))
	}
	save := func(c *CheckpointStore, seqs ...uint64) {
		t.Helper()
		for _, seq := range seqs {
			_, end := ckptBounds(t, c, 0)
			firsts[seq] = end
			if err := c.Save(ctx, snap(seq)); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(c *CheckpointStore, seqs ...uint64) {
		t.Helper()
		if got := ckptSeqsOn(t, c, 0); !slices.Equal(got, seqs) {
			t.Errorf("the partition holds seqs %v, want %v", got, seqs)
		}
		if lo, _ := ckptBounds(t, c, 0); lo != firsts[seqs[0]] {
			t.Errorf("the partition starts at %d, want %d (the first chunk of seq %d)", lo, firsts[seqs[0]], seqs[0])
		}
	}
	chain := func(seqs ...uint64) (ss []*state.Snapshot) {
		for _, seq := range seqs {
			ss = append(ss, snap(seq))
		}
		return ss
	}
	save(c, 1, 2, 3)
	want(c, 1, 2, 3)
	save(c, 4, 5)
	want(c, 1, 2, 3, 4, 5) // two chains
	save(c, 6)
	want(c, 4, 5, 6) // the chain of 1 is deleted whole
	save(c, 7, 8)
	want(c, 4, 5, 6, 7, 8) // deltas delete nothing
	ckptWantChain(t, c, chain(6, 7, 8)...)

	// A restarted process knows one chain until it saves bases.
	c2 := newCkptStore(t, brokers, "ckpt.chain.keep", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: keep})
	ckptWantChain(t, c2, chain(6, 7, 8)...)
	save(c2, 9)
	want(c2, 4, 5, 6, 7, 8, 9)

	// A failed deletion: the next Save, even a delta's, tries again.
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
	firsts[10], _ = ckptBounds(t, c2, 0)
	err := c2.Save(ctx, snap(10))
	var pe *state.PruneError
	if !errors.As(err, &pe) || !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("Save with DeleteRecords failing: %v, want a *state.PruneError", err)
	}
	want(c2, 4, 5, 6, 7, 8, 9, 10)
	save(c2, 11)
	want(c2, 9, 10, 11)
	ckptWantChain(t, c, chain(10, 11)...)
}

// ckptEncodeV1 is the encoding of s in format version 1 (written before
// snapshots had a parent), as the build of that time wrote it.
func ckptEncodeV1(s *state.Snapshot) []byte {
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := []byte("VIGILCKP")
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendVarint(b, int64(s.Task))
	b = binary.AppendUvarint(b, s.Seq)
	b = binary.AppendUvarint(b, uint64(len(s.Offsets)))
	for _, k := range slices.Sorted(maps.Keys(s.Offsets)) {
		b = binary.AppendVarint(str(b, k), s.Offsets[k])
	}
	b = binary.AppendUvarint(b, uint64(len(s.Sections)))
	for _, k := range slices.Sorted(maps.Keys(s.Sections)) {
		b = str(b, k)
		b = append(binary.AppendUvarint(b, uint64(len(s.Sections[k]))), s.Sections[k]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// ckptRecordsV1 is ckptRecords as the build before chains wrote them: five
// headers, no parent, and the version 1 encoding.
func ckptRecordsV1(topic string, s *state.Snapshot, chunkBytes int) []*kgo.Record {
	b := ckptEncodeV1(s)
	n := max(1, (len(b)+chunkBytes-1)/chunkBytes)
	recs := make([]*kgo.Record, n)
	for i := range n {
		lo, hi := i*chunkBytes, min((i+1)*chunkBytes, len(b))
		recs[i] = &kgo.Record{Topic: topic, Partition: s.Task, Value: b[lo:hi:hi], Headers: []kgo.RecordHeader{
			{Key: ckptHdrTask, Value: []byte(strconv.Itoa(int(s.Task)))},
			{Key: ckptHdrSeq, Value: []byte(strconv.FormatUint(s.Seq, 10))},
			{Key: ckptHdrChunk, Value: []byte(strconv.Itoa(i))},
			{Key: ckptHdrChunks, Value: []byte(strconv.Itoa(n))},
			{Key: ckptHdrLength, Value: []byte(strconv.Itoa(len(b)))},
		}}
	}
	return recs
}

func TestCheckpointChainOldFormat(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.chain.v1", 1, CheckpointStoreConfig{ChunkBytes: chunk, OnCorrupt: bad.record})
	old := ckptSnap(0, 41, 1300)
	if got, err := state.Decode(ckptEncodeV1(old)); err != nil || !bytes.Equal(state.Encode(got), state.Encode(old)) {
		t.Fatalf("test bug: the version 1 encoding does not decode to the snapshot: %v", err)
	}
	recs := ckptRecordsV1(c.topic, old, chunk)
	if len(recs) < 2 {
		t.Fatalf("test bug: %d chunks", len(recs))
	}
	ckptProduceRaw(t, brokers, recs...)
	ckptWantChain(t, c, old)
	d := ckptDelta(0, 42, 41, 300)
	ckptSave(t, c, d)
	c2 := newCkptStore(t, brokers, c.topic, 1, CheckpointStoreConfig{ChunkBytes: chunk, OnCorrupt: bad.record})
	ckptWantChain(t, c2, old, d)
	ckptExpectSkips(t, &bad, c.topic)
}

// TestCheckpointChainReadsBack checks that Chain reads the partition back to
// the base of the newest chain, not to the chain before it.
func TestCheckpointChainReadsBack(t *testing.T) {
	b, brokers := ckptBroker(t)
	const chunk = 300
	c := newCkptStore(t, brokers, "ckpt.chain.back", 1, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 1000})
	var base int64 // the first offset of the newest base
	var want []*state.Snapshot
	most := 0 // chunks of the largest snapshot
	for seq := uint64(1); seq <= 40; seq++ {
		s := ckptSnap(0, seq, 100*int(seq%7))
		if seq%8 != 1 { // bases at 1, 9, .., 33
			s.Parent = seq - 1
		} else {
			_, base = ckptBounds(t, c, 0)
			want = want[:0]
		}
		want = append(want, s)
		most = max(most, len(ckptRecords(c.topic, s, chunk)))
		ckptSave(t, c, s)
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
	c2 := newCkptStore(t, brokers, "ckpt.chain.back", 1, CheckpointStoreConfig{})
	ckptWantChain(t, c2, want...)
	mu.Lock()
	defer mu.Unlock()
	// Reading the base's last chunk, Chain guesses the base is as large as
	// the delta after it, and may read a few records of the chain before.
	if lowest < base-int64(most) {
		t.Errorf("Chain fetched from offset %d; the newest chain starts at %d", lowest, base)
	}
}

func TestParseCkptChunk(t *testing.T) {
	hdrs := func(kv ...string) *kgo.Record {
		r := &kgo.Record{}
		for i := 0; i < len(kv); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return r
	}
	base := []string{"task", "1", "seq", "5", "chunk", "0", "chunks", "1", "length", "10"}
	for _, tc := range []struct {
		kv     []string
		parent uint64
		err    string
	}{
		{kv: base},
		{kv: append(slices.Clone(base), "parent", "0")},
		{kv: append(slices.Clone(base), "parent", "4"), parent: 4},
		{kv: append(slices.Clone(base), "parent", "5"), err: "a parent comes before"},
		{kv: append(slices.Clone(base), "parent", "x"), err: `header parent="x"`},
		{kv: append(slices.Clone(base), "parent", "1", "parent", "2"), err: "repeated"},
		{kv: append(slices.Clone(base), "seq", "6"), err: "repeated"},
		{kv: base[2:], err: "not a checkpoint chunk"},
	} {
		h, err := parseCkptChunk(hdrs(tc.kv...))
		switch {
		case tc.err == "" && (err != nil || h.parent != tc.parent || h.seq != 5):
			t.Errorf("%v: %+v, %v, want parent %d", tc.kv, h, err, tc.parent)
		case tc.err != "" && (!errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v, want an ErrCorrupt about %q", tc.kv, err, tc.err)
		}
	}
}
