package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
)

// TestCheckpointChainCompacts: with the Kafka store and a base every two
// deltas, a task's checkpoints form chains that its save merges into new
// bases; the chain the store returns then restores to the task's state,
// byte for byte.
func TestCheckpointChainCompacts(t *testing.T) {
	svc, _ := testService(t, rulesExplain, func(c *Config) {
		c.CheckpointInterval = time.Hour
		c.Checkpoints = CheckpointsKafka
		c.CheckpointBaseEvery = 2
	})
	waitReady(t, svc)
	tk := svc.task(0)
	if tk == nil {
		t.Fatal("no task 0")
	}
	onTask := func(fn func()) {
		done := make(chan struct{})
		tk.calls <- func() { fn(); close(done) }
		<-done
	}
	for round := range 6 {
		var recs []*kgo.Record
		for i := range 5 {
			recs = append(recs, &kgo.Record{Topic: "tx", Partition: 0, Offset: int64(1<<40 + 10*round + i),
				Value: fmt.Appendf(nil, `{"tx_id":"z%d-%d","user_id":"zu%d","amount":%d,"ts":%d}`, round, i, i%3, i+1, 1000+100*round+i)})
		}
		tk.in <- &batch{topic: "tx", records: recs}
		for done := false; !done; {
			onTask(func() { done = tk.next["tx"] > int64(1<<40+10*round+4) })
		}
		onTask(func() {
			if err := tk.checkpoint(context.Background(), true); err != nil {
				t.Error(err)
			}
			tk.finishCut()
			tk.saving.lock(context.Background()) // the save finishCut started
			tk.saving.unlock()
		})
	}
	chain, err := svc.ckpt.Chain(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if chain[0].Parent != 0 || chain[0].Seq == 1 || len(chain) > 3 {
		t.Fatalf("chain: base seq %d (parent %d), %d elements; want a merged base and at most 2 deltas",
			chain[0].Seq, chain[0].Parent, len(chain))
	}
	data := make([][]byte, len(chain))
	for i, s := range chain {
		data[i] = s.Sections[sectionEngine]
	}
	var want []byte
	onTask(func() { want, err = tk.eng.Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := engine.NewTask(tk.rs, func(engine.Output) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.RestoreChain(data); err != nil {
		t.Fatal(err)
	}
	got, err := fresh.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the chain restores to another state (%d vs %d bytes)", len(got), len(want))
	}
}
