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
// accounted for in each phase, under both deliveries (the default), the
// exactly-once ratio, a latency per configuration with ordered percentiles.
// No timing is asserted: machines are noisy.
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
	deliveryFields := []string{"delivery", "checkpoints", "checkpoint_interval_ms", "checkpoint_base_every"}
	kafkaFields := slices.Concat(throughputFields, deliveryFields, []string{"decisions", "decision_ids", "end_markers",
		"processed_at_stop", "first_decision_ms", "first_visible_ms", "percent_of_replay", "gogc"})
	sections := map[string][]string{
		"workload":                 {"events", "users", "seed", "partitions", "transactions", "transaction_ids", "logins", "devices", "bytes"},
		"load":                     throughputFields,
		"passthrough":              append(throughputFields, "produced"),
		"replay":                   append(throughputFields, "decisions", "gogc"),
		"vigil_kafka":              kafkaFields,
		"vigil_kafka_exactly_once": kafkaFields,
		"exactly_once_ratio":       {"median_run", "median_of_runs", "runs", "goal"},
		"latency": append(slices.Clone(deliveryFields), "rate", "duration_seconds", "users", "events", "transactions", "transaction_ids", "decided",
			"achieved_rate", "max_behind_ms", "p50_ms", "p99_ms", "max_ms", "gogc"),
	}
	if got := string(raw["security"]); got != `"SASL_SSL SCRAM-SHA-512"` {
		t.Errorf("security %s, want SASL_SSL SCRAM-SHA-512", got)
	}
	for _, top := range []string{"broker", "gomaxprocs", "end_markers", "replay_runs", "kafka_runs", "kafka_runs_exactly_once", "latencies"} {
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
	if r.Passthrough == nil || r.Replay == nil || r.VigilKafka == nil || r.VigilKafkaExactlyOnce == nil || r.ExactlyOnceRatio == nil ||
		r.Latency == nil || len(r.Latencies) != 3 {
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
	for _, k := range []*benchKafka{r.VigilKafka, r.VigilKafkaExactlyOnce} {
		checkKafkaRun(t, k, wl, r.EndMarkers)
	}
	if d := r.VigilKafka.benchDelivery; d != (benchDelivery{"at-least-once", "kafka", 10_000, 20}) {
		t.Errorf("at-least-once run: %+v, want the kafka store and DefaultConfig's checkpoints", d)
	}
	if d := r.VigilKafkaExactlyOnce.benchDelivery; d != (benchDelivery{"exactly-once", "kafka", 100, 600}) {
		t.Errorf("exactly-once run: %+v, want kafka.ExactlyOnceDefaults", d)
	}
	if len(r.ReplayRuns) != 2 || !slices.Contains(r.ReplayRuns, r.Replay.EventsPerSec) {
		t.Errorf("--runs 2: replay runs %v (median %v)", r.ReplayRuns, r.Replay.EventsPerSec)
	}
	for _, runs := range []struct {
		median float64
		all    []float64
	}{{r.VigilKafka.EventsPerSec, r.KafkaRuns}, {r.VigilKafkaExactlyOnce.EventsPerSec, r.KafkaRunsExactlyOnce}} {
		if len(runs.all) != 2 || !slices.Contains(runs.all, runs.median) {
			t.Errorf("--runs 2: Kafka runs %v (median %v)", runs.all, runs.median)
		}
	}
	q := r.ExactlyOnceRatio
	if len(q.Runs) != 2 || q.Runs[0] != r.KafkaRunsExactlyOnce[0]/r.KafkaRuns[0] || !slices.Contains(q.Runs, q.MedianOfRuns) ||
		q.MedianRun != r.VigilKafkaExactlyOnce.EventsPerSec/r.VigilKafka.EventsPerSec || q.Goal != 0.7 {
		t.Errorf("exactly-once ratio %+v; runs %v and %v", q, r.KafkaRunsExactlyOnce, r.KafkaRuns)
	}

	want := []benchDelivery{{"at-least-once", "kafka", 10_000, 20}, {"exactly-once", "kafka", 100, 600}, {"exactly-once", "kafka", 1000, 600}}
	for i, l := range r.Latencies {
		if l.benchDelivery != want[i] {
			t.Errorf("latency %d: %+v, want %+v", i, l.benchDelivery, want[i])
		}
		checkLatency(t, l, 2000)
	}
	if *r.Latency != *r.Latencies[0] {
		t.Errorf("latency %+v is not the at-least-once one of latencies, %+v", r.Latency, r.Latencies[0])
	}
}

// checkKafkaRun checks a run of phase 3: every transaction record decided
// once, every partition processed to its end, its input offsets committed.
func checkKafkaRun(t *testing.T, k *benchKafka, wl benchWorkload, endMarkers int) {
	t.Helper()
	if k.Events != wl.Events || !(k.Seconds > 0) || !(k.EventsPerSec > 0) {
		t.Errorf("over Kafka, %s: %d events in %v s, %v events/s: want %d events, both positive", k.Delivery, k.Events, k.Seconds, k.EventsPerSec, wl.Events)
	}
	if k.DecisionIDs != wl.TransactionIDs || k.Decisions != wl.Transactions {
		t.Errorf("over Kafka, %s: %d decisions for %d ids; want one per transaction record, %d for %d ids",
			k.Delivery, k.Decisions, k.DecisionIDs, wl.Transactions, wl.TransactionIDs)
	}
	if k.EndMarkers != endMarkers {
		t.Errorf("over Kafka, %s: %d of %d partitions processed to their end marker", k.Delivery, k.EndMarkers, endMarkers)
	}
	if k.ProcessedAtStop != int64(wl.Events+endMarkers) {
		t.Errorf("over Kafka, %s: the service committed %d input offsets at its stop, want %d events + %d end markers",
			k.Delivery, k.ProcessedAtStop, wl.Events, endMarkers)
	}
	if !(k.PercentOfReplay > 0) || !(k.FirstVisibleMs > 0) {
		t.Errorf("over Kafka, %s: percent_of_replay %v, first_visible_ms %v: want both positive", k.Delivery, k.PercentOfReplay, k.FirstVisibleMs)
	}
}

// checkLatency checks a configuration of phase 4: every transaction id
// decided, the percentiles ordered.
func checkLatency(t *testing.T, l *benchLatency, events int) {
	t.Helper()
	if l.Events != events || l.TransactionIDs == 0 || l.Decided != l.TransactionIDs {
		t.Errorf("latency, %s: %d events, %d of %d transaction ids decided; want %d events, all decided",
			l.Delivery, l.Events, l.Decided, l.TransactionIDs, events)
	}
	if !(l.AchievedRate > 0) {
		t.Errorf("latency, %s: achieved rate %v", l.Delivery, l.AchievedRate)
	}
	if !(0 <= l.P50Ms && l.P50Ms <= l.P99Ms && l.P99Ms <= l.MaxMs) {
		t.Errorf("latency, %s: p50 %v, p99 %v, max %v: want 0 <= p50 <= p99 <= max", l.Delivery, l.P50Ms, l.P99Ms, l.MaxMs)
	}
}

// TestBenchOneDelivery runs phases 3 and 4 under exactly-once alone, at a
// commit interval of its own: the at-least-once fields stay empty, and no
// ratio is reported without both.
func TestBenchOneDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and two services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := program().Run(ctx, []string{"bench", "--events", "1000", "--users", "100", "--latency-duration", "1s",
		"--rate", "1000", "--delivery", "exactly-once", "--commit-intervals", "50ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit status %d\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if r.VigilKafka != nil || len(r.KafkaRuns) != 0 || r.ExactlyOnceRatio != nil || r.Latency != nil {
		t.Errorf("at-least-once figures without --delivery at-least-once: %s", out.String())
	}
	k := r.VigilKafkaExactlyOnce
	if k == nil || len(r.KafkaRunsExactlyOnce) != 1 || len(r.Latencies) != 1 {
		t.Fatalf("exactly-once figures missing: %s", out.String())
	}
	want := benchDelivery{"exactly-once", "kafka", 50, 600}
	if k.benchDelivery != want || r.Latencies[0].benchDelivery != want {
		t.Errorf("phase 3 ran %+v, phase 4 %+v; want %+v", k.benchDelivery, r.Latencies[0].benchDelivery, want)
	}
	checkKafkaRun(t, k, r.Workload, r.EndMarkers)
	checkLatency(t, r.Latencies[0], 1000)
}

// TestBenchDeliveryFlags: --delivery, --commit-intervals and --checkpoints
// refuse what phases 3 and 4 cannot run.
func TestBenchDeliveryFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--delivery", "at-most-once"}, `--delivery: "at-most-once" is not at-least-once or exactly-once`},
		{[]string{"--delivery", "exactly-once,exactly-once"}, "--delivery: exactly-once twice"},
		{[]string{"--commit-intervals", "0s"}, "--commit-intervals: 0s is not a whole number of milliseconds"},
		{[]string{"--commit-intervals", "100ms,1.5ms"}, "--commit-intervals: 1.5ms is not a whole number of milliseconds"},
		{[]string{"--commit-intervals", "1s,1000ms"}, "--commit-intervals: 1s twice"},
		{[]string{"--commit-intervals", "soon"}, `--commit-intervals: time: invalid duration "soon"`},
		{[]string{"--checkpoints", "s3"}, "--checkpoints must be kafka or dir"},
	} {
		var out strings.Builder
		if code := program().Run(context.Background(), append([]string{"bench"}, tt.args...), &out, &out); code != 2 || !strings.Contains(out.String(), tt.want) {
			t.Errorf("bench %q: exit %d, output %q; want exit 2 and %q", tt.args, code, out.String(), tt.want)
		}
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
