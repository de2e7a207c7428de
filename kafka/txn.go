package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/state"
)

// Delivery guarantees of the outputs (Config.Delivery; docs/design.md
// "Exactly-once").
const (
	// AtLeastOnce writes outputs as they are made. After a crash a task
	// restores its checkpoint and makes again, and writes again, what it
	// made after it: a consumer may see an output twice, identical.
	AtLeastOnce = "at-least-once"
	// ExactlyOnce writes a task's outputs in Kafka transactions, one per
	// checkpoint, each holding the checkpoint itself: a read_committed
	// consumer sees every output once, when its checkpoint commits.
	ExactlyOnce = "exactly-once"
)

// ExactlyOnceDefaults holds the defaults vigil serve takes under
// exactly-once where the user set none. Outputs become visible when their
// checkpoint commits, so checkpoints come often, as Kafka Streams commits
// every 100 ms under exactly-once; each is a delta of the keys changed
// since the one before, and a base every minute at most keeps the
// merging's cost, which grows with the whole state, off most checkpoints.
var ExactlyOnceDefaults = struct {
	CheckpointInterval  time.Duration
	CheckpointBaseEvery int
}{100 * time.Millisecond, 600}

// Under exactly-once each task has two transactional producers, one per
// output generation (task.gen). A transaction holds one generation's
// outputs, from one cut to the next, and the checkpoint of the second cut:
// the state, and the input offsets, that those outputs lead to. It commits
// when the checkpoint is saved in it, so outputs, state and offsets are
// visible together or not at all, and a restore resumes from exactly the
// committed offsets with exactly the committed state. While one
// generation's transaction is being saved and committed on the
// checkpoint's goroutine, the task goes on producing into the other's, as
// it does under at-least-once.
//
// The checkpoint must be written in the transaction, so exactly-once needs
// the Kafka checkpoint store (CheckpointStore.SaveIn). A task's
// transactional ids are stable (transactionalID): the next owner of the
// task, at its start, fences the previous owner's producers before it reads
// the checkpoint, aborting what they left open; a paused owner that wakes up
// cannot commit after that.

// txnTimeout is how long a transaction may stay open before the broker
// aborts it: a checkpoint interval, the wait for its cut, and its save,
// which at a large state with a compaction takes seconds.
const txnTimeout = time.Minute

// transactionalID names generation g's producer of task p. It is the same
// in every instance of the group and across restarts.
func (s *Service) transactionalID(p int32, g int) string {
	return fmt.Sprintf("%s-task-%d-%d", s.cfg.Group, p, g)
}

// txnOutcome is how one transaction ended, for the decision API requests
// whose records it holds: they answer once it commits.
type txnOutcome struct {
	done chan struct{}
	once sync.Once
	err  error
}

func newTxnOutcome() *txnOutcome { return &txnOutcome{done: make(chan struct{})} }

// end records the outcome; only the first call counts.
func (o *txnOutcome) end(err error) {
	o.once.Do(func() {
		o.err = err
		close(o.done)
	})
}

// wait returns nil once the transaction committed, its error if it did not.
func (o *txnOutcome) wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errTaskStopped ends the transactions a stopping task leaves open.
var errTaskStopped = errors.New("the task stopped before the transaction committed")

// openTxns creates the task's transactional producers, fences the
// producers of the task's previous owner and opens a transaction on each.
// It runs before the task reads its checkpoint: fencing aborts what the
// previous owner left open, and only then is the checkpoint topic's last
// stable offset past it.
func (t *task) openTxns(ctx context.Context) error {
	cfg := &t.s.cfg
	for g := range t.txn {
		opts := []kgo.Opt{
			kgo.TransactionalID(t.s.transactionalID(t.part, g)),
			kgo.TransactionTimeout(txnTimeout),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
			kgo.ProducerLinger(cfg.Linger),
			kgo.RecordDeliveryTimeout(0),
		}
		cl, err := t.s.client(append(opts, t.s.txnStore.producerOpts()...)...)
		if err != nil {
			t.closeTxns()
			return err
		}
		t.txn[g] = cl
		// Loading the producer id sends InitProducerId for the
		// transactional id, which bumps its epoch: the previous owner's
		// open transaction is aborted, and its produces and commits fail
		// from now on.
		if _, _, err := cl.ProducerID(ctx); err != nil {
			t.closeTxns()
			return fmt.Errorf("fencing the task's previous producers: %w", err)
		}
		if err := cl.BeginTransaction(); err != nil {
			t.closeTxns()
			return err
		}
		t.outcomes[g] = newTxnOutcome()
	}
	return nil
}

// closeTxns ends the outcomes still open and closes the producers. A
// transaction left open is aborted by the next owner's fencing, or by the
// broker after txnTimeout.
func (t *task) closeTxns() {
	for g, cl := range t.txn {
		if o := t.outcomes[g]; o != nil {
			o.end(errTaskStopped)
		}
		if cl != nil {
			cl.Close()
		}
	}
}

// producer returns the client generation gen's outputs are produced with.
func (t *task) producer(gen int) *kgo.Client {
	if cl := t.txn[gen]; cl != nil {
		return cl
	}
	return t.s.cl
}

// saveInTxn saves snap in generation gen's transaction, commits it, and
// opens the generation's next transaction; then it prunes the checkpoint
// topic, which must wait for the commit.
func (t *task) saveInTxn(ctx context.Context, snap *state.Snapshot, gen int) error {
	cl := t.txn[gen]
	err := t.s.txnStore.SaveIn(ctx, cl, snap)
	if err == nil {
		err = cl.Flush(ctx) // every record produced before EndTransaction (franz-go's rule)
	}
	if err == nil {
		if err = cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	}
	t.outcomes[gen].end(err)
	if err != nil {
		return err
	}
	t.outcomes[gen] = newTxnOutcome()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	return t.s.txnStore.Prune(ctx, t.part)
}

// failTxn ends generation gen's outcome with err, when the transaction will
// not commit (a checkpoint failed before its save).
func (t *task) failTxn(gen int, err error) {
	if o := t.outcomes[gen]; o != nil {
		o.end(err)
	}
}
