package kafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topicReader reads a topic from its start, keeping every record.
type topicReader struct {
	t    *testing.T
	cl   *kgo.Client
	recs []*kgo.Record
}

func readTopic(t *testing.T, addr, topic string) *topicReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &topicReader{t: t, cl: cl}
}

// until polls until done holds for the records read so far.
func (r *topicReader) until(what string, done func([]*kgo.Record) bool) []*kgo.Record {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !done(r.recs) {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.t.Fatalf("%s: not within 30s (%d records)", what, len(r.recs))
		}
		fs.EachRecord(func(rec *kgo.Record) { r.recs = append(r.recs, rec) })
	}
	return r.recs
}

// withKey reports whether recs hold a record with this key.
func withKey(key string) func([]*kgo.Record) bool {
	return func(recs []*kgo.Record) bool {
		for _, r := range recs {
			if string(r.Key) == key {
				return true
			}
		}
		return false
	}
}

func atLeast(n int) func([]*kgo.Record) bool {
	return func(recs []*kgo.Record) bool { return len(recs) >= n }
}

func waitReady(t *testing.T, svc *Service) {
	t.Helper()
	for i := 0; svc.Ready() != nil; i++ {
		if i == 1500 {
			t.Fatal("service not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond) // polling: the group assigns in its own time
	}
}

// TestNotTextRefused: a record whose value holds text that is not Unicode
// (invalid UTF-8, an unpaired surrogate escape), in its id, its key or any
// other string, goes to the DLQ with the reason and its exact bytes, and is
// not decided: replaced with U+FFFD, "w\xff" and "w\xfe" would be one id.
// The Kafka record key is not read (it only places the record): one that
// is not UTF-8 changes nothing.
func TestNotTextRefused(t *testing.T) {
	svc, addr := testService(t, rulesA)
	waitReady(t, svc)
	c := newClient(t, addr)
	bad := []struct{ value, err string }{
		{"{\"tx_id\":\"w\xff\",\"user_id\":\"u1\",\"amount\":1,\"ts\":1}", "value is not JSON: invalid JSON at offset 11: invalid UTF-8 in string"},
		{"{\"tx_id\":\"w\xfe\",\"user_id\":\"u1\",\"amount\":1,\"ts\":1}", "value is not JSON: invalid JSON at offset 11: invalid UTF-8 in string"},
		{`{"tx_id":"w\ud800","user_id":"u1","amount":1,"ts":1}`, `value is not JSON: invalid JSON at offset 11: unpaired UTF-16 surrogate in \u escape`},
		{"{\"tx_id\":\"b1\",\"user_id\":\"u\xff\",\"amount\":1,\"ts\":1}", "value is not JSON: invalid JSON at offset 26: invalid UTF-8 in string"},
		{`{"tx_id":"b2","user_id":"u\udfff","amount":1,"ts":1}`, `value is not JSON: invalid JSON at offset 26: unpaired UTF-16 surrogate in \u escape`},
		{"{\"tx_id\":\"b3\",\"user_id\":\"u1\",\"note\":\"caf\xe9\",\"ts\":1}", "value is not JSON: invalid JSON at offset 40: invalid UTF-8 in string"},
	}
	for _, b := range bad {
		c.produce("tx", "u1", b.value) // one partition: the DLQ keeps their order
	}
	c.produce("tx", "u1", `{"tx_id":"w\ufffd","user_id":"u1","amount":1,"ts":2}`) // U+FFFD itself is text
	c.produce("tx", "\xff\xfe", `{"tx_id":"k1","user_id":"u1","amount":1,"ts":3}`)

	dec := readTopic(t, addr, DefaultTopics.Decisions)
	dec.until("decisions of w\ufffd and k1", func(recs []*kgo.Record) bool {
		return withKey("w\ufffd")(recs) && withKey("k1")(recs)
	})
	for _, r := range dec.recs {
		if k := string(r.Key); k != "w\ufffd" && k != "k1" {
			t.Errorf("a refused record was decided: key %q: %s", r.Key, r.Value)
		}
	}
	dlq := readTopic(t, addr, DefaultTopics.DLQ)
	for i, r := range dlq.until("DLQ records", atLeast(len(bad))) {
		var m struct{ Error, Raw string }
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatal(err)
		}
		raw, _ := base64.StdEncoding.DecodeString(m.Raw)
		if m.Error != bad[i].err || string(raw) != bad[i].value {
			t.Errorf("DLQ record %d: error %q, raw %q; want %q, %q", i, m.Error, raw, bad[i].err, bad[i].value)
		}
	}
}

// usersOnTwoPartitions returns two users that producers keyed by user place
// on different partitions of two (Kafka's murmur2), so on different tasks.
func usersOnTwoPartitions() (string, string) {
	for i := 1; ; i++ {
		if b := fmt.Sprintf("u%d", i); partitionOf(b, 2) != partitionOf("u0", 2) {
			return "u0", b
		}
	}
}

// TestIDConflictAcrossTasks: a transaction id sent again with another key,
// which another task of the instance owns, is refused: on Kafka it goes to
// the DLQ naming the partition that holds the id, and the decisions topic has one
// verdict for the id (its record repeated for a repeat, byte for byte); the
// decision API answers service.ErrIDConflict (409) for it, in both directions.
func TestIDConflictAcrossTasks(t *testing.T) {
	svc, addr := testService(t, rulesCount)
	waitReady(t, svc)
	ua, ub := usersOnTwoPartitions()
	c := newClient(t, addr)
	dec := readTopic(t, addr, DefaultTopics.Decisions)
	dlq := readTopic(t, addr, DefaultTopics.DLQ)
	tx := func(id, user string, ts int) string {
		return fmt.Sprintf(`{"tx_id":%q,"user_id":%q,"amount":5,"ts":%d}`, id, user, ts)
	}

	c.produce("tx", ua, tx("t1", ua, 1000))
	dec.until("decision of t1", withKey("t1"))
	c.produce("tx", ub, tx("t1", ub, 2000)) // another user: ub's task, which never saw t1
	recs := dlq.until("DLQ record of t1 for "+ub, atLeast(1))
	var m struct{ Error string }
	json.Unmarshal(recs[0].Value, &m)
	want := fmt.Sprintf(`id "t1" was already seen on partition %d within its retention: refused, not decided again`, partitionOf(ua, 2))
	if m.Error != want {
		t.Errorf("DLQ error %q, want %q", m.Error, want)
	}

	// The API, both ways: t1 for ub (held by ua's task), and t2 decided
	// for ub, then sent for ua on Kafka and through the API.
	ctx := context.Background()
	if _, _, err := svc.Decide(ctx, "tx", []byte(tx("t1", ub, 2000))); !errors.Is(err, service.ErrIDConflict) {
		t.Errorf("Decide(t1 for %s) = %v, want service.ErrIDConflict", ub, err)
	}
	r2, _, err := svc.Decide(ctx, "tx", []byte(tx("t2", ub, 3000)))
	if err != nil {
		t.Fatal(err)
	}
	if reasonOf(t, r2.Record) != "1" {
		t.Errorf("%s's first accepted transaction counts %s events: the refused one counted", ub, reasonOf(t, r2.Record))
	}
	if _, _, err := svc.Decide(ctx, "tx", []byte(tx("t2", ua, 3000))); !errors.Is(err, service.ErrIDConflict) {
		t.Errorf("Decide(t2 for %s) = %v, want service.ErrIDConflict", ua, err)
	}
	c.produce("tx", ua, tx("t2", ua, 3000))
	c.produce("tx", ua, tx("t1", ua, 1000)) // a repeat: the stored decision again
	c.produce("tx", ua, tx("t3", ua, 4000))
	dlq.until("DLQ record of t2 for "+ua, atLeast(2))
	dec.until("decision of t3", withKey("t3"))

	verdicts := map[string][]string{}
	for _, r := range dec.recs {
		verdicts[string(r.Key)] = append(verdicts[string(r.Key)], string(r.Value))
	}
	if len(verdicts["t1"]) != 2 || verdicts["t1"][0] != verdicts["t1"][1] || len(verdicts["t2"]) != 1 {
		t.Errorf("decision records of t1 %q and t2 %q: want one verdict each (t1's repeated as is)", verdicts["t1"], verdicts["t2"])
	}
	// ua's state counts t1 and t3: neither refused event.
	if got := reasonOf(t, []byte(verdicts["t3"][0])); got != "2" {
		t.Errorf("t3 sees %s events of %s, want 2", got, ua)
	}
}

const rulesExplain = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  big: {stream: tx, action: review, when: 'amount >= 100 && len(history("tx", "1h")) >= 1'}
`

// TestDecideRepeatFeatures: a repeated request gets the stored decision with
// the features of the first answer, identical.
func TestDecideRepeatFeatures(t *testing.T) {
	svc, _ := testService(t, rulesExplain)
	waitReady(t, svc)
	ctx := context.Background()
	body := []byte(`{"tx_id":"f1","user_id":"u1","amount":150,"ts":1000}`)
	first, _, err := svc.Decide(ctx, "tx", body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{"big": {"amount": 150.0, `len(history("tx", "1h"))`: 1.0}}
	if diff := cmp.Diff(want, first.Features); diff != "" {
		t.Fatalf("first answer's features (-want +got):\n%s", diff)
	}
	again, replay, err := svc.Decide(ctx, "tx", body)
	if err != nil || !replay {
		t.Fatalf("repeat: replay %v, %v", replay, err)
	}
	if string(again.Record) != string(first.Record) || !strings.Contains(string(again.Record), `"rule":"big"`) {
		t.Errorf("repeat decision %s, first %s", again.Record, first.Record)
	}
	f1, _ := json.Marshal(first.Features)
	f2, _ := json.Marshal(again.Features)
	if string(f1) != string(f2) {
		t.Errorf("repeat features %s, first %s", f2, f1)
	}
}
