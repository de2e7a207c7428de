package kafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/telemetry"
)

// testService runs a Service on an in-process broker. It returns the broker
// address; the service stops at cleanup, and Run must return nil.
func testService(t *testing.T, rules string, opts ...func(*Config)) (*Service, string) {
	t.Helper()
	svc, b, stop := startService(t, rules, opts...)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return svc, b.Addr()
}

// errRunHung is what startService's stop returns when Run has not returned
// a minute after its context ended: a hang, whatever the shutdown timeout.
var errRunHung = errors.New("Run has not returned a minute after its context ended")

// startService runs a Service on an in-process broker (two partitions).
// stop ends the run and returns what Run returned, or errRunHung; it runs
// at cleanup if the test has not called it.
func startService(t *testing.T, rules string, opts ...func(*Config)) (svc *Service, b *Broker, stop func() error) {
	t.Helper()
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	svc, err = New(context.Background(), testConfig(t, b.Addr(), opts...), []byte(rules), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute): // a hang, not a timing
			return errRunHung
		}
	})
	t.Cleanup(func() { stop() })
	return svc, b, stop
}

// testConfig is the Config of testService's service on the broker at addr.
func testConfig(t *testing.T, addr string, opts ...func(*Config)) Config {
	cfg := Config{Kafka: kconf.Config{Brokers: []string{addr}}, DataDir: t.TempDir(), Partitions: 2,
		CheckpointInterval: 200 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// client is a plain franz-go client: a producer of inputs and a reader of
// the decisions topic.
type client struct {
	t  *testing.T
	cl *kgo.Client
}

func newClient(t *testing.T, addr string) *client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(DefaultTopics.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &client{t, cl}
}

func (c *client) produce(topic, key, value string) {
	c.t.Helper()
	if err := c.cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
		c.t.Fatal(err)
	}
}

// decision waits for the decision of id.
func (c *client) decision(id string) map[string]any {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			c.t.Fatalf("no decision for %s within 30s", id)
		}
		var found map[string]any
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == id && found == nil {
				json.Unmarshal(r.Value, &found)
			}
		})
		if found != nil {
			return found
		}
	}
}

func firedRules(d map[string]any) string {
	var names []string
	for _, r := range d["rules"].([]any) {
		names = append(names, r.(map[string]any)["rule"].(string))
	}
	return strings.Join(names, ",")
}

const rulesA = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  never: {stream: tx, action: review, when: 'amount < 0'}
`

// rulesB adds a rule over rulesA.
const rulesB = rulesA + `
  fives: {stream: tx, action: block, when: 'amount == 5'}
`

// TestHotSwap: a ruleset published on the rules topic while events flow is
// used by the next decisions, without a restart; a document that does not
// load is refused and the running version stays; publishing the previous
// version again rolls back.
func TestHotSwap(t *testing.T) {
	svc, addr := testService(t, rulesA)
	c := newClient(t, addr)
	n := 0
	tx := func() map[string]any {
		n++
		id := fmt.Sprintf("t%d", n)
		c.produce("tx", "u1", fmt.Sprintf(`{"tx_id":%q,"user_id":"u1","amount":5,"ts":%d}`, id, n))
		return c.decision(id)
	}
	if got := firedRules(tx()); got != "" {
		t.Fatalf("under rulesA: rules %q fired", got)
	}
	vB, err := PushRules(context.Background(), kconf.Config{Brokers: []string{addr}}, DefaultTopics.Rules, []byte(rulesB), 1, "test", "add fives")
	if err != nil {
		t.Fatal(err)
	}
	// The switch is asynchronous: the first decision under B comes within a
	// few transactions, and every one after it is under B too.
	switched := false
	for range 50 {
		d := tx()
		if firedRules(d) == "fives" {
			switched = true
		} else if switched {
			t.Fatalf("decision %v after the switch is not under the new version", d)
		}
		if switched && svc.Ruleset().Version == vB.Digest {
			break
		}
		time.Sleep(50 * time.Millisecond) // letting the watcher see the new version
	}
	if !switched {
		t.Fatal("the new rule never fired")
	}

	// A broken document and a stale proposal, written around PushRules.
	c.produce(DefaultTopics.Rules, "v3-x", `{"version":3,"document":"streams: [not a map"}`)
	c.produce(DefaultTopics.Rules, "v2-y", `{"version":2,"document":"streams: {}"}`)
	time.Sleep(500 * time.Millisecond) // giving the watcher the time to see it
	if got := firedRules(tx()); got != "fives" {
		t.Fatalf("after a broken document: rules %q fired, want the running version's", got)
	}
	if svc.Ruleset().Version != vB.Digest {
		t.Fatalf("running version %s, want %s", svc.Ruleset().Version, vB.Digest)
	}

	// Rollback: publish A again.
	vA, err := PushRules(context.Background(), kconf.Config{Brokers: []string{addr}}, DefaultTopics.Rules, []byte(rulesA), 2, "test", "roll back")
	if err != nil {
		t.Fatal(err)
	}
	if vA.Number != 3 {
		t.Errorf("rollback published version %d, want 3 (the refused proposals take no number)", vA.Number)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if firedRules(tx()) == "" {
			break
		}
		if i == 50 {
			t.Fatal("rollback not applied after 50 transactions")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBadInput: unreadable records go to the DLQ topic with topic,
// partition, offset, error and the raw bytes in base64; the records after
// them are processed.
func TestBadInput(t *testing.T) {
	_, addr := testService(t, rulesA, func(c *Config) { c.MaxRecordBytes = 80 << 10 })
	c := newClient(t, addr)
	huge := `{"tx_id":"h","user_id":"u1","pad":"` + strings.Repeat("x", 100<<10) + `"}`
	bad := []string{"not json", `{"tx_id":"x","amount":1}`, "\xff\xfe", huge}
	for _, v := range bad {
		c.produce("tx", "u1", v)
	}
	c.produce("tx", "u1", `{"tx_id":"ok","user_id":"u1","amount":1,"ts":1}`)
	if d := c.decision("ok"); d["action"] != "allow" {
		t.Fatalf("decision after bad records: %v", d)
	}
	dlq, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(DefaultTopics.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	var got []map[string]any
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < len(bad) && ctx.Err() == nil {
		dlq.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var m map[string]any
			if err := json.Unmarshal(r.Value, &m); err != nil {
				t.Errorf("DLQ record is not JSON: %q", r.Value)
			}
			got = append(got, m)
		})
	}
	if len(got) != len(bad) {
		t.Fatalf("%d DLQ records, want %d", len(got), len(bad))
	}
	for i, m := range got {
		raw, _ := base64.StdEncoding.DecodeString(m["raw"].(string))
		want := bad[i]
		if len(want) > engine.MaxDLQRawBytes {
			want = want[:engine.MaxDLQRawBytes]
			if m["raw_bytes"] != float64(len(bad[i])) {
				t.Errorf("DLQ record %d: raw_bytes %v, want %d", i, m["raw_bytes"], len(bad[i]))
			}
		}
		if m["topic"] != "tx" || m["stream"] != "tx" || m["offset"] != float64(i) || m["error"] == "" || string(raw) != want {
			t.Errorf("DLQ record %d: %.300v (raw %.100q)", i, m, raw)
		}
	}
}

// TestPublishVersions: versions are numbered from 1; a publish based on a
// stale version is a conflict; of two racing publishes on the same version,
// exactly one wins; a document that does not load is refused.
func TestPublishVersions(t *testing.T) {
	svc, _ := testService(t, rulesA)
	ctx := context.Background()
	if cur := svc.Current(); cur.Number != 1 || cur.Author != "vigil serve" {
		t.Fatalf("seeded version: %+v", cur)
	}
	if _, err := svc.Publish(ctx, []byte(rulesB), 7, "t", ""); !errors.Is(err, service.ErrVersionConflict) {
		t.Fatalf("stale base: err %v, want service.ErrVersionConflict", err)
	}
	if _, err := svc.Publish(ctx, []byte("streams: ["), 1, "t", ""); err == nil {
		t.Fatal("a broken document was published")
	}
	errs := make(chan error, 2)
	for _, doc := range []string{rulesB, rulesB + "  other: {stream: tx, action: allow, when: 'true'}\n"} {
		go func() {
			_, err := svc.Publish(ctx, []byte(doc), 1, "t", "race")
			errs <- err
		}()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) {
		t.Fatalf("racing publishes: %v and %v, want exactly one conflict", e1, e2)
	}
	vs := svc.Versions()
	if len(vs) != 2 || vs[1].Number != 2 || vs[1].Comment != "race" {
		t.Fatalf("versions after the race: %d, last %+v", len(vs), vs[len(vs)-1])
	}
}

const rulesCount = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  count: {stream: tx, action: review, when: 'true', reason: 'string(len(history("tx", "1h")))'}
`

// reasonOf returns the reason of a decision's first rule.
func reasonOf(t *testing.T, b []byte) string {
	t.Helper()
	var d struct {
		Rules []struct{ Reason string } `json:"rules"`
	}
	if err := json.Unmarshal(b, &d); err != nil || len(d.Rules) == 0 {
		t.Fatalf("decision %s: %v", b, err)
	}
	return d.Rules[0].Reason
}

// TestDecideAPI: a decision requested through the service counts in the
// key's state once (the input record it writes is not processed again), is
// written once to the decisions topic, and is returned again for the same
// id; the same id with another body is a conflict.
func TestDecideAPI(t *testing.T) {
	svc, addr := testService(t, rulesCount)
	c := newClient(t, addr)
	ctx := context.Background()
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	body := `{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`
	r1, replay, err := svc.Decide(ctx, "tx", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if replay || reasonOf(t, r1.Record) != "1" {
		t.Fatalf("first decision: %s (replay %v)", r1.Record, replay)
	}
	r2, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"a2","user_id":"u1","amount":5,"ts":2000}`))
	if err != nil || reasonOf(t, r2.Record) != "2" {
		t.Fatalf("second decision: %s, %v", r2.Record, err)
	}
	again, replay, err := svc.Decide(ctx, "tx", []byte(body))
	if err != nil || !replay || string(again.Record) != string(r1.Record) {
		t.Fatalf("same id again: %s (replay %v), %v", again.Record, replay, err)
	}
	if _, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"a1","user_id":"u1","amount":6,"ts":1000}`)); !errors.Is(err, service.ErrIDConflict) {
		t.Fatalf("same id, other body: %v, want service.ErrIDConflict", err)
	}
	if _, _, err := svc.Decide(ctx, "nope", []byte(body)); !errors.Is(err, service.ErrNotDecided) {
		t.Fatalf("unknown stream: %v", err)
	}
	// A transaction through Kafka after them: the two API events count once.
	c.produce("tx", "u1", `{"tx_id":"k3","user_id":"u1","amount":5,"ts":3000}`)
	if got := reasonOf(t, mustJSON(t, c.decision("k3"))); got != "3" {
		t.Fatalf("after two API decisions, a Kafka transaction sees %s events, want 3", got)
	}
	if d, err := svc.Decision(ctx, "a2"); err != nil || string(d.Record) != string(r2.Record) {
		t.Fatalf("Decision(a2) = %s, %v", d, err)
	}
	if _, err := svc.Decision(ctx, "zz"); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("Decision(zz): %v", err)
	}
	v, err := svc.Entity(ctx, "u1", service.EntityQuery{})
	if err != nil || len(v.Decisions) != 3 {
		t.Fatalf("entity: %+v, %v", v, err)
	}
	// Each id once on the decisions topic (a1 twice: its replay is not re-emitted).
	counts := map[string]int{}
	// Read until all three are there and a fetch brings nothing more (a
	// fixed window of 2 s came back empty on a loaded machine).
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rd, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(DefaultTopics.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer rd.Close()
	for ctx2.Err() == nil {
		n := 0
		poll, cancelPoll := context.WithTimeout(ctx2, time.Second) // PollFetches waits for records
		rd.PollFetches(poll).EachRecord(func(r *kgo.Record) { counts[string(r.Key)]++; n++ })
		cancelPoll()
		if n == 0 && counts["a1"] > 0 && counts["a2"] > 0 && counts["k3"] > 0 {
			break
		}
	}
	if counts["a1"] != 1 || counts["a2"] != 1 || counts["k3"] != 1 {
		t.Errorf("decision records per id: %v, want one each", counts)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBacktestTopics: a candidate ruleset is backtested over what the input
// topics retain; the live state is untouched.
func TestBacktestTopics(t *testing.T) {
	svc, addr := testService(t, rulesA)
	c := newClient(t, addr)
	for i, amount := range []int{5, 7, 5, 9, 5} {
		c.produce("tx", fmt.Sprintf("u%d", i%2), fmt.Sprintf(`{"tx_id":"b%d","user_id":"u%d","amount":%d,"ts":%d}`, i, i%2, amount, i))
	}
	c.produce("tx", "u0", "not json")
	c.decision("b4")
	rep, err := svc.Backtest(context.Background(), []byte(rulesB), nil, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decisions != 5 || rep.NewHits["fives"] != 3 || rep.ChangedByAction["allow->block"] != 3 || len(rep.Samples) != 3 {
		t.Fatalf("report: %+v", rep)
	}
	if svc.Ruleset().Version == "" || strings.Contains(svc.Current().Document, "fives") {
		t.Fatal("the backtest changed the running ruleset")
	}
}

// TestMetrics: the service's counters and gauges reach /metrics.
func TestMetrics(t *testing.T) {
	tel, err := telemetry.New(telemetry.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, addr := testService(t, rulesB+`
patterns:
  two: {stream: tx, steps: [{name: a, where: amount == 5}, {name: b, where: amount == 99}]}
`, func(c *Config) { c.Metrics = tel.Metrics() })
	c := newClient(t, addr)
	c.produce("tx", "u1", `{"tx_id":"m1","user_id":"u1","amount":5,"ts":1000}`)
	c.produce("tx", "u1", `not json`)
	c.produce("tx", "u1", `{"tx_id":"m2","user_id":"u1","amount":6,"ts":2000}`)
	c.decision("m2")
	time.Sleep(gaugeEvery + 500*time.Millisecond) // the partial-match gauge is reported every gaugeEvery
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`vigil_records_in_total{stream="tx"} 3`,
		`vigil_decisions_total{action="block"} 1`,
		`vigil_decisions_total{action="allow"} 1`,
		`vigil_rule_hits_total{mode="active",rule="fives"} 1`,
		`vigil_dlq_total{reason_class="decode",stream="tx"} 1`,
		`vigil_records_out_total{kind="decision"} 2`,
		`vigil_decision_latency_seconds_count{source="kafka"} 2`,
		`vigil_watermark_timestamp_seconds{task="`,
		`vigil_partial_matches{pattern="two"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestPartitionOf: the decision API places keys where franz-go's (and the
// Java client's) default partitioner does.
func TestPartitionOf(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 2000 {
		key := fmt.Sprintf("u%0*d", i%9, i)
		for _, n := range []int32{1, 3, 4, 12, 100} {
			want := int32(p.Partition(&kgo.Record{Key: []byte(key)}, int(n)))
			if got := partitionOf(key, n); got != want {
				t.Fatalf("partitionOf(%q, %d) = %d, want %d", key, n, got, want)
			}
		}
	}
}

// TestDecideAcrossVersions: decisions requested while new ruleset versions
// are published are all answered. A request that read the running version
// just before a publication reaches a task already on the next one; it is
// tried again, not answered "saturated" (which a caller would see as a 429).
// With a base every other checkpoint, the chains compact across the
// switches: each switch's first checkpoint must be a base (a delta of the
// new version on the old one's chain would not merge, and the compaction's
// error stopped the service).
func TestDecideAcrossVersions(t *testing.T) {
	svc, addr := testService(t, rulesCount, func(c *Config) { c.CheckpointBaseEvery = 2 })
	ctx := context.Background()
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				body := fmt.Sprintf(`{"tx_id":"w%d-%d","user_id":"u%d","amount":5,"ts":%d}`, w, i, i%7, i)
				if _, _, err := svc.Decide(ctx, "tx", []byte(body)); err != nil {
					errs <- fmt.Errorf("decision %d of worker %d: %w", i, w, err)
					return
				}
			}
		})
	}
	cfg := kconf.Config{Brokers: []string{addr}}
	for n := range 20 {
		// Each version differs from the one before (a reason of its own).
		doc := strings.Replace(rulesCount, "action: review", fmt.Sprintf("action: review, description: v%d", n+2), 1)
		v, err := PushRules(ctx, cfg, DefaultTopics.Rules, []byte(doc), int64(n+1), "test", "")
		if err != nil {
			t.Fatal(err)
		}
		for wait := time.Now(); svc.Ruleset().Version != v.Digest; {
			if time.Since(wait) > 30*time.Second {
				t.Fatalf("version %d not running after 30 s", v.Number)
			}
			time.Sleep(time.Millisecond) // the watcher's turn
		}
	}
	close(stop)
	wg.Wait()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestDecideNotRecorded: a decision whose writes the broker refuses is not
// answered as one; the request gets the broker's error, and the service
// stops rather than run on with a gap in what it recorded.
func TestDecideNotRecorded(t *testing.T) {
	svc, b, stop := startService(t, rulesCount)
	defer func() {
		if err := stop(); !errors.Is(err, kerr.InvalidRecord) {
			t.Errorf("Run after the broker refused a decision: %v, want the broker's error", err)
		}
	}()
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	ctx := context.Background()
	if _, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`)); err != nil {
		t.Fatal(err)
	}
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID // v13 names topics by id
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	wait, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	d, _, err := svc.Decide(wait, "tx", []byte(`{"tx_id":"a2","user_id":"u1","amount":5,"ts":2000}`))
	if !errors.Is(err, kerr.InvalidRecord) || !strings.Contains(err.Error(), "not recorded") {
		t.Fatalf("a decision the broker refused to record: %v, %v; want a \"not recorded\" error wrapping INVALID_RECORD", d, err)
	}
}

// TestShutdownBrokerSilent: a broker that stops acknowledging writes does
// not hold a stopping service past its shutdown timeout. (The final
// checkpoint waited, without end, for the save in flight, which waited for
// acknowledgements that never came.)
func TestShutdownBrokerSilent(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*Config)
	}{
		{"at-least-once,dir", func(*Config) {}},
		{"at-least-once,kafka", func(c *Config) { c.Checkpoints = CheckpointsKafka }},
		{"exactly-once", exactlyOnce},
	} {
		t.Run(tc.name, func(t *testing.T) { testShutdownBrokerSilent(t, tc.opt) })
	}
}

func testShutdownBrokerSilent(t *testing.T, opt func(*Config)) {
	svc, b, stop := startService(t, rulesCount, opt, func(c *Config) { c.ShutdownTimeout = time.Second })
	silenceBroker(t, svc, b)
	switch err := stop(); {
	case errors.Is(err, errRunHung):
		t.Fatalf("%v (shutdown timeout 1 s)", err)
	case err == nil:
		t.Error("Run returned nil with its outputs unacknowledged")
	}
}

// silenceBroker waits for svc's tasks, then makes b read every Produce
// request and answer none, and leaves a decision of user u1 in flight:
// an output the next checkpoint of its task must wait for.
func silenceBroker(t *testing.T, svc *Service, b *Broker) {
	t.Helper()
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		return nil, nil, true
	})
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := svc.Decide(short, "tx", []byte(`{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision the broker never acknowledges: %v, want its deadline", err)
	}
}

// TestRevokeBrokerSilent: a partition revoked while the broker acknowledges
// no write gives up its final checkpoint after the shutdown timeout, as a
// shutdown does, rather than holding franz-go's rebalance callback (and so
// this member out of the group) for as long as the client lives.
func TestRevokeBrokerSilent(t *testing.T) {
	svc, b, stop := startService(t, rulesCount, func(c *Config) { c.ShutdownTimeout = time.Second })
	silenceBroker(t, svc, b)
	p := partitionOf("u1", svc.counts["tx"]) // the task of silenceBroker's decision
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		svc.revoke(context.Background(), nil, map[string][]int32{"tx": {p}}) // the client's context: no end
	}()
	select {
	case <-revoked:
	case <-time.After(time.Minute):
		t.Fatal("the revoke has not returned a minute later (shutdown timeout 1 s)")
	}
	if svc.task(p) != nil {
		t.Errorf("task %d still runs after its revoke", p)
	}
	if err := stop(); errors.Is(err, errRunHung) {
		t.Error(err)
	}
}

// TestDecideTaskStopped: a request that found its task just before the
// task stopped (its partition revoked, or the service stopping) is answered
// "no owner now", not left waiting for a task that will never run it. (It
// waited until its deadline: 5 s of 503s at every deploy; with no deadline,
// for ever.)
func TestDecideTaskStopped(t *testing.T) {
	svc, _ := testService(t, rulesCount)
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	body := []byte(`{"tx_id":"a1","user_id":"u1","amount":5,"ts":1000}`)
	p := partitionOf("u1", svc.counts["tx"])
	tk := svc.task(p)
	if tk == nil {
		t.Fatalf("no task for partition %d", p)
	}
	if err := svc.stopTasks(context.Background(), map[int32]bool{p: true}); err != nil {
		t.Fatal(err)
	}
	// The request found the task before it stopped.
	svc.mu.Lock()
	svc.tasks[p] = tk
	svc.mu.Unlock()
	defer func() {
		svc.mu.Lock()
		delete(svc.tasks, p) // stopped already: Run must not stop it again
		svc.mu.Unlock()
	}()
	got := make(chan error, 1)
	go func() {
		_, _, err := svc.Decide(context.Background(), "tx", body) // no deadline
		got <- err
	}()
	select {
	case err := <-got:
		var no *service.NotOwnerError
		if !errors.As(err, &no) || no.Partition != p || no.Owner != "" {
			t.Fatalf("a decision for a stopped task: %v, want a *service.NotOwnerError for partition %d and no owner", err, p)
		}
	case <-time.After(time.Minute): // a hang, not a timing
		t.Fatal("a decision for a stopped task still waits after a minute")
	}
}
