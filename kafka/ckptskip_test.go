package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// TestIdleTaskSkipsCheckpoint: a periodic checkpoint of a task that has
// done nothing since its previous one writes nothing (reads through the API
// change nothing); one after a record was processed, or a decision asked,
// writes a new snapshot.
func TestIdleTaskSkipsCheckpoint(t *testing.T) {
	svc, _ := testService(t, rulesExplain, func(c *Config) { c.CheckpointInterval = time.Hour })
	waitReady(t, svc)
	tk := svc.task(0)
	if tk == nil {
		t.Fatal("no task 0")
	}
	// checkpoint takes a periodic checkpoint on the task's goroutine, once
	// the save of the previous one is done, waits for its save, and returns
	// how many snapshots it wrote (0 or 1).
	checkpoint := func() uint64 {
		wrote := make(chan uint64, 1)
		tk.calls <- func() {
			tk.saving.lock(context.Background())
			tk.saving.unlock()
			before := tk.ckpt.seq
			if err := tk.checkpoint(context.Background(), true); err != nil {
				t.Error(err)
			}
			tk.finishCut() // encode the cut's records now, and start its save
			tk.saving.lock(context.Background())
			wrote <- tk.ckpt.seq - before
			tk.saving.unlock()
		}
		return <-wrote
	}
	if n := checkpoint(); n != 1 {
		t.Fatalf("first checkpoint wrote %d snapshots, want 1", n)
	}
	if n := checkpoint(); n != 0 {
		t.Errorf("an idle task wrote %d snapshots, want 0", n)
	}
	if _, err := svc.Entity(context.Background(), "u1", service.EntityQuery{}); err != nil {
		t.Fatal(err)
	}
	if n := checkpoint(); n != 0 {
		t.Errorf("after an entity read, the checkpoint wrote %d snapshots, want 0", n)
	}
	const off = 1 << 40 // far past anything produced
	tk.in <- &batch{topic: "tx", records: []*kgo.Record{{Topic: "tx", Partition: 0, Offset: off,
		Value: []byte(`{"tx_id":"k1","user_id":"u1","amount":5,"ts":1000}`)}}}
	for {
		got := make(chan bool, 1)
		tk.calls <- func() { got <- tk.next["tx"] > off }
		if <-got {
			break
		}
	}
	if n := checkpoint(); n != 1 {
		t.Errorf("after a record, the checkpoint wrote %d snapshots, want 1", n)
	}
	if n := checkpoint(); n != 0 {
		t.Errorf("idle again: %d snapshots, want 0", n)
	}
	tk.calls <- func() { tk.work.decides++ } // what Decide does first
	if n := checkpoint(); n != 1 {
		t.Errorf("after a decision asked of the API, the checkpoint wrote %d snapshots, want 1", n)
	}
}

// TestCheckpointOnChanges: with checkpoints an hour apart, a task whose
// changes waiting for the next cut reach CheckpointMaxChanges checkpoints
// anyway, and its changes start from zero again.
func TestCheckpointOnChanges(t *testing.T) {
	svc, _ := testService(t, rulesExplain, func(c *Config) {
		c.CheckpointInterval = time.Hour
		c.CheckpointMaxChanges = 8
	})
	waitReady(t, svc)
	tk := svc.task(0)
	if tk == nil {
		t.Fatal("no task 0")
	}
	state := func() (seq uint64, changes int) {
		got := make(chan struct{}, 1)
		tk.calls <- func() {
			changes = tk.eng.Changes()
			tk.saving.lock(context.Background())
			seq = tk.ckpt.seq
			tk.saving.unlock()
			got <- struct{}{}
		}
		<-got
		return seq, changes
	}
	before, _ := state()
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: "tx", Partition: 0, Offset: int64(1<<40 + i),
			Value: fmt.Appendf(nil, `{"tx_id":"c%d","user_id":"cu%d","amount":5,"ts":1000}`, i, i)})
	}
	tk.in <- &batch{topic: "tx", records: recs}
	for i := 0; ; i++ {
		seq, changes := state()
		if seq > before && changes < 8 {
			break
		}
		if i == 1000 {
			t.Fatalf("no checkpoint after 20 records: seq %d (before %d), %d changes waiting", seq, before, changes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCheckpointDueBehind: past its interval a task checkpoints at once
// when nothing is queued, but while batches wait it also waits backlogPause
// times as long as its last cut took; the pile of changes still forces one.
func TestCheckpointDueBehind(t *testing.T) {
	rs, err := rules.Load([]byte(rulesA))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.NewTask(rs, func(engine.Output) {})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	tk := &task{s: &Service{cfg: Config{CheckpointInterval: time.Second, CheckpointMaxChanges: 1 << 19}},
		eng: eng, in: make(chan *batch, 1), cutCost: time.Second}
	at := func(ago time.Duration) bool {
		tk.lastCkpt = time.Now().Add(-ago)
		return tk.checkpointDue()
	}
	if at(500 * time.Millisecond) {
		t.Error("due before the interval")
	}
	if !at(2 * time.Second) {
		t.Error("idle, past the interval: not due")
	}
	tk.in <- &batch{}
	if at(2 * time.Second) {
		t.Error("behind, past the interval but within the pause after a 1 s cut: due")
	}
	if !at(backlogPause*time.Second + time.Second) {
		t.Error("behind, past the pause: not due")
	}
	tk.s.cfg.CheckpointMaxChanges = 0
	if !at(0) {
		t.Error("changes piled up: not due")
	}
}
