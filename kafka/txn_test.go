package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

func exactlyOnce(c *Config) {
	c.Delivery = ExactlyOnce
	c.Checkpoints = CheckpointsKafka
}

// committedCounts reads topic to its end as a read_committed consumer and
// counts the records per key, until want's keys are all there and a fetch
// brings nothing more.
func committedCounts(t *testing.T, addr, topic string, want ...string) map[string]int {
	t.Helper()
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counts := map[string]int{}
	for ctx.Err() == nil {
		n := 0
		poll, cancelPoll := context.WithTimeout(ctx, time.Second)
		rd.PollFetches(poll).EachRecord(func(r *kgo.Record) { counts[string(r.Key)]++; n++ })
		cancelPoll()
		all := true
		for _, k := range want {
			all = all && counts[k] > 0
		}
		if n == 0 && all {
			break
		}
	}
	return counts
}

// TestExactlyOnceDecide: under exactly-once, a decision the API answered
// is committed (a read_committed consumer sees it, once), and so are the
// decisions of events read from Kafka; a replay of an id answers the same.
func TestExactlyOnceDecide(t *testing.T) {
	svc, addr := testService(t, rulesCount, exactlyOnce)
	waitReady(t, svc)
	ctx := context.Background()
	body := `{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`
	r1, replay, err := svc.Decide(ctx, "tx", []byte(body))
	if err != nil || replay {
		t.Fatalf("decide: %v (replay %v)", err, replay)
	}
	// Answered means committed: the decisions topic's last stable offset
	// is past the decision already.
	lso, err := svc.adm.ListCommittedOffsets(ctx, DefaultTopics.Decisions)
	if err != nil {
		t.Fatal(err)
	}
	stable := int64(0)
	lso.Each(func(o kadm.ListedOffset) { stable += o.Offset })
	if stable == 0 {
		t.Fatal("the decision was answered before its transaction committed")
	}
	again, replay, err := svc.Decide(ctx, "tx", []byte(body))
	if err != nil || !replay || string(again.Record) != string(r1.Record) {
		t.Fatalf("same id again: %s (replay %v), %v", again.Record, replay, err)
	}
	c := newClient(t, addr)
	c.produce("tx", "u1", `{"tx_id":"k2","user_id":"u1","amount":5,"ts":2000}`)
	got := committedCounts(t, addr, DefaultTopics.Decisions, "a1", "k2")
	if got["a1"] != 1 || got["k2"] != 1 || len(got) != 2 {
		t.Errorf("committed decisions per id: %v, want a1 and k2 once each", got)
	}
	if reason := reasonOf(t, mustJSON(t, c.decision("k2"))); reason != "2" {
		t.Errorf("k2 sees %s events, want 2 (the API's event counts once)", reason)
	}
}

// TestExactlyOnceFenced: once another producer has taken a task's
// transactional ids, as the task's next owner does at its start, the task
// cannot commit: its checkpoint fails, and so does the service, rather than
// writing beside the new owner.
func TestExactlyOnceFenced(t *testing.T) {
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	svc, err := New(context.Background(), testConfig(t, b.Addr(), exactlyOnce), []byte(rulesCount), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	waitReady(t, svc)
	if _, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`)); err != nil {
		t.Fatal(err)
	}
	// The next owner of every task fences both generations' producers.
	for p := range int32(2) {
		for g := range 2 {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID(svc.transactionalID(p, g)))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := cl.ProducerID(ctx); err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
		}
	}
	// Decisions now wait for a commit that cannot happen.
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	_, _, err = svc.Decide(dctx, "tx", []byte(`{"tx_id":"a2","user_id":"u1","amount":5,"ts":2000}`))
	if err == nil {
		t.Fatal("a decision was answered after the task was fenced")
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "EPOCH") && !strings.Contains(err.Error(), "FENCED") {
			t.Fatalf("Run: %v, want the task fenced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced service did not stop")
	}
	if got := committedCounts(t, b.Addr(), DefaultTopics.Decisions, "a1"); got["a2"] != 0 {
		t.Errorf("the fenced task committed a2: %v", got)
	}
}

// TestExactlyOnceBacktest: a backtest over the input topics reads what is
// committed: an input record of an aborted transaction (the decision API's
// event of a transaction a crash aborted, say) is not replayed.
func TestExactlyOnceBacktest(t *testing.T) {
	svc, addr := testService(t, rulesA, exactlyOnce)
	waitReady(t, svc)
	ctx := context.Background()
	if _, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`)); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("a-crashed-producer"), kgo.DefaultProduceTopic("tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("u1"), Value: []byte(`{"tx_id":"gone","user_id":"u1","amount":5,"ts":2000}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := svc.Backtest(bctx, []byte(rulesB), nil, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions != 1 || rep.NewHits["fives"] != 1 {
		t.Fatalf("backtest over a1 and an aborted record: %+v, want a1 alone", rep)
	}
}

// TestExactlyOnceSwitch: a ruleset published while an exactly-once service
// runs is switched to between two events (the task's next checkpoint is a
// full one, in its transaction); decisions before and after the switch are
// each committed once.
func TestExactlyOnceSwitch(t *testing.T) {
	svc, addr := testService(t, rulesA, exactlyOnce)
	waitReady(t, svc)
	ctx := context.Background()
	decide := func(id string) string {
		t.Helper()
		d, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"`+id+`","user_id":"u1","amount":5,"ts":1000}`))
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(d.Record, &rec); err != nil {
			t.Fatal(err)
		}
		return firedRules(rec)
	}
	if got := decide("s0"); got != "" {
		t.Fatalf("under rulesA: %q fired", got)
	}
	vB, err := PushRules(ctx, kconf.Config{Brokers: []string{addr}}, DefaultTopics.Rules, []byte(rulesB), 1, "test", "add fives")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"s0"}
	for i := 1; ; i++ {
		id := fmt.Sprintf("s%d", i)
		want = append(want, id)
		if decide(id) == "fives" {
			break
		}
		if i == 200 {
			t.Fatalf("no decision under version %d", vB.Number)
		}
		time.Sleep(20 * time.Millisecond) // letting the watcher see the new version
	}
	got := committedCounts(t, addr, DefaultTopics.Decisions, want...)
	for _, id := range want {
		if got[id] != 1 {
			t.Errorf("%s committed %d times, want once (all: %v)", id, got[id], got)
		}
	}
}

// TestDeliverySwitchKeepsState: a group that switches between at-least-once
// and exactly-once with its checkpoints on the Kafka store keeps its state
// across the restart, both ways: a key's history (a rule counts it) and the
// ids it remembers (a known id answers its first decision).
func TestDeliverySwitchKeepsState(t *testing.T) {
	const rules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  third: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 3'}
`
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dataDir := t.TempDir()
	atLeastOnceKafka := func(c *Config) { c.Delivery, c.Checkpoints = AtLeastOnce, CheckpointsKafka }
	atLeastOnceDir := func(c *Config) { c.Delivery, c.Checkpoints = AtLeastOnce, CheckpointsDir }
	// run runs a service under opt until decide is done, then stops it
	// (its last checkpoint is written at the stop).
	var logs strings.Builder
	run := func(opt func(*Config), decide func(svc *Service)) {
		t.Helper()
		cfg := testConfig(t, b.Addr(), opt)
		cfg.DataDir = dataDir
		logs.Reset()
		cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
		svc, err := New(context.Background(), cfg, []byte(rules), true)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		waitReady(t, svc)
		decide(svc)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	action := func(svc *Service, id string) string {
		t.Helper()
		d, _, err := svc.Decide(context.Background(), "tx", []byte(`{"tx_id":"`+id+`","user_id":"u1","ts":`+fmt.Sprint(1000+len(id))+`}`))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct{ Action string }
		if err := json.Unmarshal(d.Record, &rec); err != nil {
			t.Fatal(err)
		}
		return rec.Action
	}
	run(atLeastOnceKafka, func(svc *Service) {
		if got := action(svc, "a"); got != "allow" {
			t.Fatalf("a: %s", got)
		}
	})
	run(exactlyOnce, func(svc *Service) {
		if got := action(svc, "bb"); got != "allow" {
			t.Fatalf("bb, the second event: %s", got)
		}
		if got := action(svc, "ccc"); got != "review" {
			t.Fatalf("ccc, the third event after the switch to exactly-once: %s (the history was lost)", got)
		}
	})
	run(atLeastOnceKafka, func(svc *Service) {
		if got := action(svc, "bb"); got != "allow" {
			t.Fatalf("bb again after the switch back: %s, not its first decision", got)
		}
		if got := action(svc, "dddd"); got != "review" {
			t.Fatalf("dddd, the fourth event after the switch back: %s (the history was lost)", got)
		}
	})
	if strings.Contains(logs.String(), "without state") {
		t.Error("a task that restored its state warned that it had none")
	}
	// Checkpoints do not move between stores: on the dir store, which
	// never held one, the tasks start without state, and say so. What
	// eeeee is decided is not asserted: the tasks read again, into their
	// empty state, the events after the group's committed offsets, and
	// how far those reached depends on how much of its own API events the
	// exactly-once run had read back before it stopped (usually all of
	// them, then "allow"; now and then not, then "review").
	run(atLeastOnceDir, func(svc *Service) { action(svc, "eeeee") })
	if !strings.Contains(logs.String(), "task starts without state from the group's committed offsets") {
		t.Errorf("no warning that a task started without state:\n%s", logs.String())
	}
}
