package kafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

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
