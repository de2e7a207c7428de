package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
)

// TestOwnEventsSkipped: a fetched input record that the decision API wrote
// and the task decided already (its offset acknowledged into ownEvents) is
// skipped, not read and deduplicated again; one with the same header that
// the set does not hold (after a restore, or fetched before its
// acknowledgement) is processed.
func TestOwnEventsSkipped(t *testing.T) {
	svc, _ := testService(t, rulesExplain)
	waitReady(t, svc)
	tk := svc.task(0)
	if tk == nil {
		t.Fatal("no task 0")
	}
	// processed sends a batch and returns the task's record count once it
	// has read past it (the task takes batches and calls in any order).
	processed := func(r *kgo.Record) int64 {
		tk.in <- &batch{topic: "tx", records: []*kgo.Record{r}}
		for {
			got := make(chan engine.Stats, 1)
			tk.calls <- func() {
				if tk.next["tx"] > r.Offset {
					got <- tk.eng.Stats()
				}
				close(got)
			}
			if st, ok := <-got; ok {
				return st.Records
			}
		}
	}
	rec := func(off int64) *kgo.Record {
		return &kgo.Record{Topic: "tx", Partition: 0, Offset: off, Headers: []kgo.RecordHeader{originAPI},
			Value: []byte(`{"tx_id":"own","user_id":"u1","amount":5,"ts":1000}`)}
	}
	// Far past anything produced, so that no real fetch interleaves.
	const base = 1 << 40
	before := make(chan int64, 1)
	tk.calls <- func() { before <- tk.eng.Stats().Records }
	n := <-before
	tk.own.add("tx", base)
	if got := processed(rec(base)); got != n {
		t.Errorf("an own event was processed: %d records, want %d", got, n)
	}
	if tk.own.take("tx", base) {
		t.Error("the skipped offset is still held")
	}
	if got := processed(rec(base + 1)); got != n+1 {
		t.Errorf("an event with the header but not in the set: %d records, want %d", got, n+1)
	}
}

// TestOnlyAPI: the poll loop waits before its next fetch only after one
// that held records and nothing but the decision API's events; an empty
// poll, or one with a record from any other producer, goes on at once.
func TestOnlyAPI(t *testing.T) {
	api := func() *kgo.Record { return &kgo.Record{Headers: []kgo.RecordHeader{originAPI}} }
	other := func() *kgo.Record {
		return &kgo.Record{Headers: []kgo.RecordHeader{{Key: originAPI.Key, Value: []byte("kafka")}}}
	}
	fetches := func(parts ...[]*kgo.Record) kgo.Fetches {
		var ps []kgo.FetchPartition
		for i, rs := range parts {
			ps = append(ps, kgo.FetchPartition{Partition: int32(i), Records: rs})
		}
		return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "tx", Partitions: ps}}}}
	}
	for _, c := range []struct {
		name string
		fs   kgo.Fetches
		want bool
	}{
		{"nothing", nil, false},
		{"empty partitions", fetches(nil, nil), false},
		{"API only", fetches([]*kgo.Record{api(), api()}, nil, []*kgo.Record{api()}), true},
		{"another producer's first", fetches([]*kgo.Record{other(), api()}), false},
		{"another producer's in a later partition", fetches([]*kgo.Record{api()}, []*kgo.Record{api(), other()}), false},
		{"no headers", fetches([]*kgo.Record{{}}), false},
	} {
		if got := onlyAPI(c.fs); got != c.want {
			t.Errorf("%s: onlyAPI = %v, want %v", c.name, got, c.want)
		}
	}
}
