package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/state"
)

// The tests in this file write snapshots the way a task's exactly-once
// producer does: the chunks of ckptRecords inside transactions of a
// transactional client, some committed, some aborted, one left open.

// ckptTxnProducer returns a transactional client with id as its
// transactional ID.
func ckptTxnProducer(t *testing.T, brokers []string, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ckptTxnBegin begins a transaction and produces the chunks of snaps in it,
// leaving it open.
func ckptTxnBegin(t *testing.T, cl *kgo.Client, topic string, chunk int, snaps ...*state.Snapshot) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, s := range snaps {
		recs = append(recs, ckptRecords(topic, s, chunk)...)
	}
	if err := cl.ProduceSync(ckptCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// ckptTxnEnd commits or aborts the open transaction.
func ckptTxnEnd(t *testing.T, cl *kgo.Client, commit bool) {
	t.Helper()
	if err := cl.EndTransaction(ckptCtx(t), kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// ckptTxn produces the chunks of snaps in one transaction and commits it,
// or aborts it.
func ckptTxn(t *testing.T, cl *kgo.Client, topic string, chunk int, commit bool, snaps ...*state.Snapshot) {
	t.Helper()
	ckptTxnBegin(t, cl, topic, chunk, snaps...)
	ckptTxnEnd(t, cl, commit)
}

// ckptPromptCtx bounds a read of the store well below ckptFetchTimeout: a
// read that waits for a record that never comes (a transaction marker, an
// aborted record, a record of an open transaction) fails with it instead of
// running into the fetch timeout. It bounds a hang; it measures nothing.
func ckptPromptCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ckptFetchTimeout/4)
	t.Cleanup(cancel)
	return ctx
}

// ckptWantChainPrompt is ckptWantChain under ckptPromptCtx.
func ckptWantChainPrompt(t *testing.T, c *CheckpointStore, want ...*state.Snapshot) {
	t.Helper()
	task := want[0].Task
	got, err := c.Chain(ckptPromptCtx(t), task)
	if err != nil {
		t.Fatalf("Chain(%d): %v", task, err)
	}
	ckptSameChain(t, task, got, want)
}

// ckptSameChain checks that got is want, snapshot by snapshot.
func ckptSameChain(t *testing.T, task int32, got, want []*state.Snapshot) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("Chain(%d) = seq/parent %v, want %v", task, ckptSeqParents(got), ckptSeqParents(want))
	}
	for i := range want {
		if g, w := state.Encode(got[i]), state.Encode(want[i]); string(g) != string(w) {
			t.Fatalf("Chain(%d) = seq/parent %v, want %v; element %d differs", task, ckptSeqParents(got), ckptSeqParents(want), i)
		}
	}
}

func ckptSeqParents(ss []*state.Snapshot) (q [][2]uint64) {
	for _, s := range ss {
		q = append(q, [2]uint64{s.Seq, s.Parent})
	}
	return q
}

// ckptHighWatermark lists the end of partition part, open transactions
// included.
func ckptHighWatermark(t *testing.T, c *CheckpointStore, part int32) int64 {
	t.Helper()
	ends, err := c.adm.ListEndOffsets(ckptCtx(t), c.topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(c.topic, part)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s/%d: %v", c.topic, part, o.Err)
	}
	return o.Offset
}

// TestCheckpointTxnChain checks that Chain returns the newest committed
// chain of a partition written in transactions: aborted snapshots and those
// of an open transaction are invisible, without reports, and a delta whose
// parent was aborted is reported as missing its parent.
func TestCheckpointTxnChain(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 500
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.txn.chain", 2, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	p := ckptTxnProducer(t, brokers, "ckpt.txn.chain.0")

	b1, d2 := ckptSnap(0, 1, 1700), ckptDelta(0, 2, 1, 1200)
	if n := len(ckptRecords(topic, b1, chunk)); n != 4 {
		t.Fatalf("test bug: %d chunks, want 4", n)
	}
	ckptTxn(t, p, topic, chunk, true, b1)
	ckptWantChainPrompt(t, c, b1)
	ckptTxn(t, p, topic, chunk, true, d2)
	ckptWantChainPrompt(t, c, b1, d2)
	ckptExpectSkips(t, &bad, topic)

	// An aborted delta 3 is not seen: the chain still ends at 2.
	ckptTxn(t, p, topic, chunk, false, ckptDelta(0, 3, 2, 1700))
	ckptWantChainPrompt(t, c, b1, d2)
	ckptExpectSkips(t, &bad, topic)

	// Delta 3 saved again, committed, with 4 on it in the same transaction.
	d3, d4 := ckptDelta(0, 3, 2, 900), ckptDelta(0, 4, 3, 1300)
	ckptTxn(t, p, topic, chunk, true, d3, d4)
	ckptWantChainPrompt(t, c, b1, d2, d3, d4)
	ckptExpectSkips(t, &bad, topic)

	// An aborted base 5, and a committed delta 6 on it: 6 has no parent.
	ckptTxn(t, p, topic, chunk, false, ckptSnap(0, 5, 1700))
	ckptTxn(t, p, topic, chunk, true, ckptDelta(0, 6, 5, 600))
	ckptWantChainPrompt(t, c, b1, d2, d3, d4)
	ckptExpectSkips(t, &bad, topic, "parent seq 5 of snapshot seq 6 is missing")

	// A base 7 and a delta 8 in a transaction left open: not read, and not
	// waited for.
	_, lso := ckptBounds(t, c, 0)
	ckptTxnBegin(t, p, topic, chunk, ckptSnap(0, 7, 1700), ckptDelta(0, 8, 7, 100))
	if _, end := ckptBounds(t, c, 0); end != lso {
		t.Errorf("with a transaction open the tail ends at %d, want %d (where the transaction begins)", end, lso)
	}
	if hwm := ckptHighWatermark(t, c, 0); hwm <= lso {
		t.Fatalf("test bug: the open transaction's chunks are not on the partition (high watermark %d, last stable offset %d)", hwm, lso)
	}
	ckptWantChainPrompt(t, c, b1, d2, d3, d4)
	ckptExpectSkips(t, &bad, topic, "parent seq 5 of snapshot seq 6 is missing")
	// A store that never ran Chain finds the task's latest seq (6, the
	// newest committed chunk) to save after.
	c2 := newCkptStore(t, brokers, topic, 2, CheckpointStoreConfig{ChunkBytes: chunk})
	if seq, ok, err := c2.lastSeq(ckptPromptCtx(t), 0); err != nil || !ok || seq != 6 {
		t.Errorf("lastSeq with a transaction open = %d, %v, %v; want 6", seq, ok, err)
	}

	// Once committed, the transaction's chain is the newest.
	ckptTxnEnd(t, p, true)
	ckptWantChainPrompt(t, c, ckptSnap(0, 7, 1700), ckptDelta(0, 8, 7, 100))
	ckptExpectSkips(t, &bad, topic) // the walk stops at base 7

	// Task 1 was never written to.
	if _, err := c.Chain(ckptPromptCtx(t), 1); !errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of task 1: %v, want ErrNoSnapshot", err)
	}
}

// TestCheckpointTxnEndsWithMarker checks that Chain and lastSeq return
// without waiting when the partition ends with a commit or an abort marker,
// or holds nothing but aborted snapshots.
func TestCheckpointTxnEndsWithMarker(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 400
	var bad ckptCorruptions
	c := newCkptStore(t, brokers, "ckpt.txn.marker", 3, CheckpointStoreConfig{ChunkBytes: chunk, Keep: 20, OnCorrupt: bad.record})
	topic := c.topic
	p := ckptTxnProducer(t, brokers, "ckpt.txn.marker")

	lastSeq := func(task int32, want uint64, wantOK bool) {
		t.Helper()
		c2 := newCkptStore(t, brokers, topic, 3, CheckpointStoreConfig{ChunkBytes: chunk})
		if seq, ok, err := c2.lastSeq(ckptPromptCtx(t), task); err != nil || ok != wantOK || seq != want {
			t.Errorf("lastSeq(%d) = %d, %v, %v; want %d, %v", task, seq, ok, err, want, wantOK)
		}
	}

	// Task 0 ends with a commit marker.
	b1, d2 := ckptSnap(0, 1, 1000), ckptDelta(0, 2, 1, 1000)
	ckptTxn(t, p, topic, chunk, true, b1, d2)
	ckptWantChainPrompt(t, c, b1, d2)
	lastSeq(0, 2, true)

	// Task 1 ends with an abort marker.
	b3 := ckptSnap(1, 3, 1000)
	ckptTxn(t, p, topic, chunk, true, b3)
	ckptTxn(t, p, topic, chunk, false, ckptDelta(1, 4, 3, 1000))
	ckptWantChainPrompt(t, c, b3)
	lastSeq(1, 3, true)

	// Task 2 holds aborted snapshots only.
	ckptTxn(t, p, topic, chunk, false, ckptSnap(2, 5, 1000))
	ckptTxn(t, p, topic, chunk, false, ckptSnap(2, 6, 10))
	if _, err := c.Chain(ckptPromptCtx(t), 2); !errors.Is(err, state.ErrNoSnapshot) {
		t.Errorf("Chain of a task with aborted snapshots only: %v, want ErrNoSnapshot", err)
	}
	lastSeq(2, 0, false)
	ckptExpectSkips(t, &bad, topic)

	// A transaction spanning two tasks: both end with its commit marker.
	b7, b8 := ckptSnap(0, 7, 1000), ckptSnap(1, 8, 1000)
	ckptTxn(t, p, topic, chunk, true, b7, b8)
	ckptWantChainPrompt(t, c, b7)
	ckptWantChainPrompt(t, c, b8)
	ckptExpectSkips(t, &bad, topic)
}

// TestCheckpointTxnMixed checks a partition on which transactional and
// plain (Save) snapshots follow each other, pruned by Save.
func TestCheckpointTxnMixed(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk, keep = 500, 2
	var bad ckptCorruptions
	cfg := CheckpointStoreConfig{ChunkBytes: chunk, Keep: keep, OnCorrupt: bad.record}
	c := newCkptStore(t, brokers, "ckpt.txn.mixed", 1, cfg)
	topic := c.topic
	p := ckptTxnProducer(t, brokers, "ckpt.txn.mixed")

	b1, d2 := ckptSnap(0, 1, 1700), ckptDelta(0, 2, 1, 800)
	ckptTxn(t, p, topic, chunk, true, b1, d2)
	ckptTxn(t, p, topic, chunk, false, ckptDelta(0, 3, 2, 800))

	// A store that has not read the partition builds on the last committed
	// chunk (2), not on the aborted one (3).
	d3 := ckptDelta(0, 3, 2, 1100)
	if err := c.Save(ckptPromptCtx(t), d3); err != nil {
		t.Fatal(err)
	}
	ckptWantChainPrompt(t, c, b1, d2, d3)
	c2 := newCkptStore(t, brokers, topic, 1, cfg)
	ckptWantChainPrompt(t, c2, b1, d2, d3)

	// Transactions again after the plain saves, and plain saves after them.
	d4, b5 := ckptDelta(0, 4, 3, 300), ckptSnap(0, 5, 1500)
	ckptTxn(t, p, topic, chunk, true, d4)
	ckptTxn(t, p, topic, chunk, true, b5)
	ckptWantChainPrompt(t, c2, b5)
	d6 := ckptDelta(0, 6, 5, 700)
	if err := c2.Save(ckptPromptCtx(t), d6); err != nil {
		t.Fatal(err)
	}
	ckptWantChainPrompt(t, c, b5, d6)
	ckptExpectSkips(t, &bad, topic)

	// Plain bases: Save deletes the records before the Keep-th newest
	// base, markers included, and the chains read as before.
	b7, b8 := ckptSnap(0, 7, 1200), ckptSnap(0, 8, 200)
	_, start7 := ckptBounds(t, c2, 0)
	ckptSave(t, c2, b7, b8)
	if lo, _ := ckptBounds(t, c2, 0); lo != start7 {
		t.Errorf("after saving bases 7 and 8 with Keep %d the partition starts at %d, want %d (base 7)", keep, lo, start7)
	}
	ckptWantChainPrompt(t, c, b8)
	d9 := ckptDelta(0, 9, 8, 900)
	ckptTxn(t, p, topic, chunk, true, d9)
	ckptWantChainPrompt(t, newCkptStore(t, brokers, topic, 1, cfg), b8, d9)
	ckptExpectSkips(t, &bad, topic)
}

// TestCheckpointTxnLastSeq checks that the latest seq a store finds on a
// partition it has not read is that of the last committed chunk: aborted
// chunks, and those of an open transaction, do not count.
func TestCheckpointTxnLastSeq(t *testing.T) {
	_, brokers := ckptBroker(t)
	const chunk = 300
	cfg := CheckpointStoreConfig{ChunkBytes: chunk}
	c := newCkptStore(t, brokers, "ckpt.txn.lastseq", 1, cfg)
	topic := c.topic
	p := ckptTxnProducer(t, brokers, "ckpt.txn.lastseq")

	ckptTxn(t, p, topic, chunk, true, ckptSnap(0, 1, 1000))
	ckptTxn(t, p, topic, chunk, false, ckptSnap(0, 5, 1000))
	ckptTxnBegin(t, p, topic, chunk, ckptSnap(0, 6, 1000))
	if seq, ok, err := c.lastSeq(ckptPromptCtx(t), 0); err != nil || !ok || seq != 1 {
		t.Errorf("lastSeq = %d, %v, %v; want 1", seq, ok, err)
	}
	ckptTxnEnd(t, p, false)
	if seq, ok, err := c.lastSeq(ckptPromptCtx(t), 0); err != nil || !ok || seq != 1 {
		t.Errorf("lastSeq after the abort = %d, %v, %v; want 1", seq, ok, err)
	}

	// Save of a store that has not read the partition: the aborted seqs 5
	// and 6 neither make seq 2 stale nor are a parent.
	c2 := newCkptStore(t, brokers, topic, 1, cfg)
	if err := c2.Save(ckptPromptCtx(t), ckptDelta(0, 6, 5, 10)); !errors.Is(err, state.ErrBrokenChain) {
		t.Errorf("a delta on the aborted seq 5: %v, want ErrBrokenChain", err)
	}
	d2 := ckptDelta(0, 2, 1, 500)
	if err := newCkptStore(t, brokers, topic, 1, cfg).Save(ckptPromptCtx(t), d2); err != nil {
		t.Fatal(err)
	}
	ckptWantChainPrompt(t, c, ckptSnap(0, 1, 1000), d2)
}
