package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHourEndInSlices: an advance that fires thousands of windows at once
// (every key's hourly window) fires them in the task's slices (engine
// Task.SliceFiring), and every one reaches the windows topic once, though
// the service stops meanwhile; the final checkpoint holds them fired, so
// the service restarted from it fires none of them again, and fires what
// comes due next (docs/design.md
// "Firing in slices").
func TestHourEndInSlices(t *testing.T) {
	const rules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true, watermark: {max_out_of_order: 1s}}
windows:
  hourly: {stream: tx, tumbling: 1h, aggregate: {n: count()}}
rules:
  never: {stream: tx, action: review, when: 'amount < 0'}
`
	const keys, hour = 1500, int64(3_600_000) // keys per partition
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dataDir := t.TempDir()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	send := func(p int32, user string, ts int64) {
		t.Helper()
		v := fmt.Sprintf(`{"tx_id":"%s-%d","user_id":%q,"ts":%d,"amount":1}`, user, ts, user, ts)
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: "tx", Partition: p, Key: []byte(user), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	windows := readTopic(t, b.Addr(), DefaultTopics.Windows)
	run := func(during func()) {
		t.Helper()
		cfg := testConfig(t, b.Addr())
		cfg.DataDir = dataDir
		svc, err := New(context.Background(), cfg, []byte(rules), true)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		waitReady(t, svc)
		during()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	run(func() {
		for p := range int32(2) {
			for i := range keys {
				send(p, fmt.Sprintf("u%d-%d", p, i), hour+int64(i))
			}
		}
		for p := range int32(2) { // past the hour on both partitions: every window fires
			send(p, fmt.Sprintf("jump%d", p), 3*hour)
		}
		// The stop comes while the slices may still be firing: the final
		// checkpoint drains what is left first.
	})
	run(func() { // restored from the checkpoint the stop wrote
		for p := range int32(2) {
			send(p, fmt.Sprintf("jump%d", p), 5*hour) // fires the first jump's windows
		}
		windows.until("the first jump's windows", atLeast(2*keys+2))
	})
	seen := make(map[string]int)
	for _, r := range windows.recs {
		var w struct {
			Key    string
			Start  int64
			Values struct{ N int64 }
		}
		if err := json.Unmarshal(r.Value, &w); err != nil {
			t.Fatal(err)
		}
		if w.Values.N != 1 {
			t.Errorf("window %s at %d counted %d events, want 1", w.Key, w.Start, w.Values.N)
		}
		seen[fmt.Sprintf("%s@%d", w.Key, w.Start)]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("window %s fired %d times", k, n)
		}
	}
	if len(seen) != 2*keys+2 {
		t.Errorf("%d windows fired, want %d", len(seen), 2*keys+2)
	}
}
