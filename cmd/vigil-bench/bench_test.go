package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchCommand runs a small `vigil-bench bench --json` through run and checks
// the report: every field present, positive throughputs, every event
// accounted for in each phase, ordered latency percentiles. No timing is
// asserted: machines are noisy.
func TestBenchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and two services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := program().Run(ctx, []string{"bench", "--events", "3000", "--users", "300", "--latency-duration", "2s",
		"--rate", "1000", "--runs", "2", "--json",
		// Every client of the bench must authenticate: one that does not
		// fails against this broker.
		"--secure"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit status %d\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}

	// Every field, by name.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out.String()), &raw); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if _, ok := raw["error"]; ok {
		t.Errorf("the report has an error: %s", raw["error"])
	}
	throughputFields := []string{"events", "seconds", "events_per_sec"}
	sections := map[string][]string{
		"workload":    {"events", "users", "seed", "partitions", "transactions", "transaction_ids", "logins", "devices", "bytes"},
		"load":        throughputFields,
		"passthrough": append(throughputFields, "produced"),
		"replay":      append(throughputFields, "decisions", "gogc"),
		"vigil_kafka": append(throughputFields, "decisions", "decision_ids", "end_markers", "processed_at_stop", "first_decision_ms", "percent_of_replay", "gogc"),
		"latency": {"rate", "duration_seconds", "users", "events", "transactions", "transaction_ids", "decided",
			"achieved_rate", "max_behind_ms", "p50_ms", "p99_ms", "max_ms", "gogc"},
	}
	if got := string(raw["security"]); got != `"SASL_SSL SCRAM-SHA-512"` {
		t.Errorf("security %s, want SASL_SSL SCRAM-SHA-512", got)
	}
	for _, top := range []string{"broker", "gomaxprocs", "end_markers", "replay_runs", "kafka_runs"} {
		if _, ok := raw[top]; !ok {
			t.Errorf("no %q in the report", top)
		}
	}
	for sec, fields := range sections {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw[sec], &m); err != nil || m == nil {
			t.Errorf("section %q missing or not an object: %s", sec, raw[sec])
			continue
		}
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				t.Errorf("%s.%s missing: %s", sec, f, raw[sec])
			}
		}
	}

	var r benchResult
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatal(err)
	}
	if r.Passthrough == nil || r.Replay == nil || r.VigilKafka == nil || r.Latency == nil {
		t.Fatalf("a phase is missing: %s", out.String())
	}
	wl := r.Workload
	if wl.Events != 3000 || wl.Users != 300 || wl.Partitions != 4 {
		t.Errorf("workload %+v, want the flags' 3000 events, 300 users, 4 partitions", wl)
	}
	if wl.Transactions+wl.Logins+wl.Devices != wl.Events || wl.TransactionIDs == 0 || wl.TransactionIDs > wl.Transactions {
		t.Errorf("workload counts do not add up: %+v", wl)
	}

	for name, tp := range map[string]benchThroughput{"passthrough": r.Passthrough.benchThroughput,
		"replay": r.Replay.benchThroughput, "vigil_kafka": r.VigilKafka.benchThroughput} {
		if tp.Events != wl.Events {
			t.Errorf("%s: %d events, want %d", name, tp.Events, wl.Events)
		}
		if !(tp.Seconds > 0) || !(tp.EventsPerSec > 0) {
			t.Errorf("%s: %v s, %v events/s: want both positive", name, tp.Seconds, tp.EventsPerSec)
		}
	}
	if r.EndMarkers != 3*wl.Partitions {
		t.Errorf("%d end markers, want one per input partition, %d", r.EndMarkers, 3*wl.Partitions)
	}
	if r.Passthrough.Produced != wl.Events+r.EndMarkers {
		t.Errorf("pass-through acknowledged %d records, want %d events + %d end markers", r.Passthrough.Produced, wl.Events, r.EndMarkers)
	}
	if r.Replay.Decisions != int64(wl.Transactions) {
		t.Errorf("replay: %d decisions, want one per transaction record, %d", r.Replay.Decisions, wl.Transactions)
	}
	k := r.VigilKafka
	if k.DecisionIDs != wl.TransactionIDs || k.Decisions < wl.Transactions {
		t.Errorf("over Kafka: %d decisions for %d ids; want %d ids and at least %d records",
			k.Decisions, k.DecisionIDs, wl.TransactionIDs, wl.Transactions)
	}
	if k.EndMarkers != r.EndMarkers {
		t.Errorf("over Kafka: %d of %d partitions processed to their end marker", k.EndMarkers, r.EndMarkers)
	}
	if k.ProcessedAtStop != int64(wl.Events+r.EndMarkers) {
		t.Errorf("over Kafka: the service committed %d input offsets at its stop, want %d events + %d end markers",
			k.ProcessedAtStop, wl.Events, r.EndMarkers)
	}
	if !(k.PercentOfReplay > 0) {
		t.Errorf("percent_of_replay %v, want positive", k.PercentOfReplay)
	}
	if len(r.ReplayRuns) != 2 || len(r.KafkaRuns) != 2 ||
		!slices.Contains(r.ReplayRuns, r.Replay.EventsPerSec) || !slices.Contains(r.KafkaRuns, k.EventsPerSec) {
		t.Errorf("--runs 2: replay runs %v (median %v), Kafka runs %v (median %v)", r.ReplayRuns, r.Replay.EventsPerSec, r.KafkaRuns, k.EventsPerSec)
	}

	l := r.Latency
	if l.Events != 2000 || l.TransactionIDs == 0 || l.Decided != l.TransactionIDs {
		t.Errorf("latency: %d events, %d of %d transaction ids decided; want 2000 events, all decided",
			l.Events, l.Decided, l.TransactionIDs)
	}
	if !(l.AchievedRate > 0) {
		t.Errorf("latency: achieved rate %v", l.AchievedRate)
	}
	if !(0 <= l.P50Ms && l.P50Ms <= l.P99Ms && l.P99Ms <= l.MaxMs) {
		t.Errorf("latency: p50 %v, p99 %v, max %v: want 0 <= p50 <= p99 <= max", l.P50Ms, l.P99Ms, l.MaxMs)
	}
}

func TestBenchPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 0: 1} {
		if got := percentile(d, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := percentile(d[:1], 99); got != 1 {
		t.Errorf("p99 of one = %v", got)
	}
}

func TestBenchRenameTopics(t *testing.T) {
	src := []byte("streams:\n  a: {topic: x, key: k}\n  b:\n    topic: y # comment\nrules: {}\n")
	got, err := renameTopics(src, ".s")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"topic: x.s", "topic: y.s"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("renamed document lacks %q:\n%s", want, got)
		}
	}
}
