package rules

import (
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/stream"
)

func TestEvaluatorExtracts(t *testing.T) {
	rs, err := Load([]byte("streams:\n  tx: {key: user.id, time: ts, id: tx_id, decide: true}\n  c: {key: k}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := rs.NewEvaluator((*Recorded)(nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fields  map[string]any
		key     string
		time    int64
		id      string
		wantErr string
	}{
		{fields: map[string]any{"user": map[string]any{"id": 42.0}, "ts": 1000.0, "tx_id": "a"}, key: "42", time: 1000, id: "a"},
		{fields: map[string]any{"user": map[string]any{"id": "u1"}, "ts": "2024-01-01T00:00:00.5Z", "tx_id": 7.0}, key: "u1", time: 1704067200500, id: "7"},
		{fields: map[string]any{"user": map[string]any{"id": "u1"}, "ts": 1.5, "tx_id": "b"}, key: "u1", time: 1, id: "b"},
		{fields: map[string]any{"user": map[string]any{}, "ts": 1.0, "tx_id": "b"}, wantErr: "key user.id is missing or null"},
		{fields: map[string]any{"user": map[string]any{"id": "u1"}, "ts": true, "tx_id": "b"}, wantErr: "time ts must be epoch milliseconds or an RFC 3339 string, not bool"},
		{fields: map[string]any{"user": map[string]any{"id": "u1"}, "ts": 1.0, "tx_id": ""}, wantErr: "id tx_id is missing, null or empty"},
	}
	for i, tt := range tests {
		key, err := ev.Key(1, MapFields(tt.fields)) // streams are indexed by name: c=0, tx=1
		var ts int64
		var id string
		if err == nil {
			ts, err = ev.Time(1, MapFields(tt.fields))
		}
		if err == nil {
			id, _, err = ev.ID(1, MapFields(tt.fields))
		}
		switch {
		case tt.wantErr != "":
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%d: error %v, want %q", i, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%d: %v", i, err)
		case key != tt.key || ts != tt.time || id != tt.id:
			t.Errorf("%d: got (%q, %d, %q), want (%q, %d, %q)", i, key, ts, id, tt.key, tt.time, tt.id)
		}
	}
	ev.SetRecordTime(5, true)
	if ts, err := ev.Time(0, MapFields(map[string]any{"k": "x"})); err != nil || ts != 5 {
		t.Errorf("time from the record timestamp: %d, %v; want 5", ts, err)
	}
}

// TestWindowArgsRepeated: an argument written twice (sum(x), max(x)) is
// evaluated once and handed to both aggregates; the others keep their own.
func TestWindowArgsRepeated(t *testing.T) {
	rs, err := Load([]byte(`
streams:
  tx: {key: k, time: ts}
windows:
  w:
    stream: tx
    tumbling: 1m
    aggregate: {n: count(), s: sum(x), m: max(x), d: count_distinct(x), y: sum(x + 1), z: max(x + 1)}
`))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := rs.NewEvaluator((*Recorded)(nil))
	if err != nil {
		t.Fatal(err)
	}
	w := rs.Windows[0]
	args := make([]any, len(w.Aggs))
	if keep, err := ev.WindowArgs(0, MapFields(map[string]any{"k": "a", "ts": 1.0, "x": 2.0}), args); err != nil || !keep {
		t.Fatalf("WindowArgs: %v, %v", keep, err)
	}
	want := map[string]any{"n": nil, "s": 2.0, "m": 2.0, "d": 2.0, "y": 3.0, "z": 3.0}
	for i, a := range w.Aggs {
		if args[i] != want[a.Name] {
			t.Errorf("%s: %v, want %v", a.Name, args[i], want[a.Name])
		}
	}
}

// BenchmarkEvaluate measures one rule over a key's history of n events, the
// per-decision cost of the example ruleset's velocity rules.
func BenchmarkEvaluate(b *testing.B) {
	doc := `streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
rules:
  many_ips: {stream: tx, action: block, score: 80, when: 'len(uniq(map(history("tx", "5m"), .ip))) >= 3'}
  card_testing: {stream: tx, action: block, score: 90, when: 'count(history("tx", "1m"), .amount <= 2) >= 5'}
  big: {stream: tx, action: review, score: 10, when: 'amount >= 1000 && currency == "EUR"'}
`
	for _, features := range []bool{true, false} {
		rs, err := Load([]byte(doc), Features(features))
		if err != nil {
			b.Fatal(err)
		}
		benchmarkRules(b, rs, fmt.Sprintf("features=%v", features))
	}
}

func benchmarkRules(b *testing.B, rs *Ruleset, label string) {
	names := rs.Streams[0].HistoryFields
	for _, n := range []int{1, 10, 100} {
		hist := &Recorded{}
		ev, err := rs.NewEvaluator(hist)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			fields := map[string]any{"ip": fmt.Sprintf("10.0.0.%d", i%4), "amount": float64(i % 5)}
			m, errs := ev.Mark(0, MapFields(fields))
			hist.Add(stream.NewRow(names, fields), m, errs)
		}
		event := map[string]any{"tx_id": "t1", "user_id": "u1", "amount": 42.5, "currency": "EUR", "ip": "10.0.0.1", "ts": 1000.0}
		for ri, r := range rs.Rules {
			b.Run(fmt.Sprintf("%s/%s/history=%d", r.Name, label, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ev.When(ri, MapFields(event)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
