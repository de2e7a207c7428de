package telemetry

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// newTestTelemetry returns a Telemetry with trace export off, shut down at
// the end of the test.
func newTestTelemetry(t testing.TB) *Telemetry {
	t.Helper()
	t.Setenv(EnvOTLPEndpoint, "")
	t.Setenv(EnvOTLPTracesEndpoint, "")
	tel, err := New(Options{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tel.Shutdown(t.Context()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tel
}

// scrapeAccept is the Accept header of Prometheus 3's default scrape
// protocols, less protobuf: OpenMetrics first.
const scrapeAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// scrape serves /metrics once, as Prometheus asks for it, and returns the
// body.
func scrape(t *testing.T, tel *Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", scrapeAccept)
	tel.MetricsHandler().ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type %q, want the text format", ct)
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// userKey and decisionID must never reach /metrics.
const (
	userKey    = "u-8431977"
	decisionID = "tx-5550123"
)

// recordAll records a known value into every instrument.
func recordAll(t *testing.T, tel *Telemetry) {
	t.Helper()
	m := tel.Metrics()
	m.RecordsIn("transactions", 2)
	m.RecordsIn("transactions", 1)
	m.RecordsIn("logins", 1)
	m.RecordsOut("decision", 2)
	m.RecordsOut("dlq", 1)
	m.DLQ("transactions", ClassifyDLQ("value is not JSON: unexpected end of input"))
	m.Checkpoint(500*time.Millisecond, 2048, nil)
	m.Checkpoint(time.Second, 0, errors.New("sink flush: broker down"))
	m.Backpressure(3, 1500*time.Millisecond)
	m.AsyncInflight(3)
	m.AsyncInflight(-1)
	m.AsyncTimeout("profile")
	m.AsyncFallback("profile")
	m.PartialMatches("ato", 5)
	m.PartialMatches("ato", -1)
	m.PartialsDropped("ato", 2)
	m.DecisionLatency("kafka", 1500*time.Microsecond)
	m.RuleHit("many_ips", "active")
	m.RuleHit("many_ips", "shadow")
	m.RuleHit("many_ips", "shadow")
	m.RuleError("many_ips")
	m.RuleQuarantined("slow")
	m.Decision("block")
	m.Forwarded("POST /v1/decisions", "ok", 2*time.Millisecond)
	m.OwnershipChanges(2)
	unTasks, err := m.ObserveTasks(func(observe func(task int32, wm, lag int64)) {
		observe(3, 1_700_000_000_000, 250)
		observe(4, NoWatermark, 0) // no event yet: not reported
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unTasks() })
	unLag, err := m.ObserveConsumerLag(func(observe func(topic string, partition int32, lag int64)) {
		observe("transactions", 3, 42)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unLag() })

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/entities/{key}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such entity", http.StatusNotFound)
	})
	h := tel.HTTPMiddleware(func(r *http.Request) string { return r.Pattern })(mux)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/entities/"+userKey+"?id="+decisionID, nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("GET /v1/entities: status %d", rec.Code)
	}
	ctx, span := tel.StartDecision(t.Context(), "transactions", decisionID)
	_ = ctx
	span.End()
}

type sample struct {
	labels string // sorted name=value pairs, comma-separated
	value  float64
}

func TestMetricsScrape(t *testing.T) {
	tel := newTestTelemetry(t)
	recordAll(t, tel)
	body := scrape(t, tel)
	fams := parse(t, body)

	// Exactly the documented names, no more and no fewer.
	var got []string
	for name := range fams {
		if strings.HasPrefix(name, "vigil_") {
			got = append(got, name)
		}
	}
	want := slices.Clone(MetricNames)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("vigil_ families in /metrics:\n got %q\nwant %q", got, want)
	}

	types := map[string]dto.MetricType{
		NameWatermark: dto.MetricType_GAUGE, NameEventTimeLag: dto.MetricType_GAUGE,
		NameConsumerLag: dto.MetricType_GAUGE, NameAsyncInflight: dto.MetricType_GAUGE,
		NamePartialMatches:     dto.MetricType_GAUGE,
		NameCheckpointDuration: dto.MetricType_HISTOGRAM, NameCheckpointBytes: dto.MetricType_HISTOGRAM,
		NameDecisionLatency: dto.MetricType_HISTOGRAM, NameHTTPDuration: dto.MetricType_HISTOGRAM,
		NameForwardDuration: dto.MetricType_HISTOGRAM,
	}
	labels := MetricLabels()
	for _, name := range MetricNames {
		f := fams[name]
		if f == nil {
			continue // reported above
		}
		wantType, ok := types[name]
		if !ok {
			wantType = dto.MetricType_COUNTER
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s does not end in _total", name)
			}
		}
		if f.GetType() != wantType {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), wantType)
		}
		if !strings.Contains(body, fmt.Sprintf("# TYPE %s %s\n", name, strings.ToLower(wantType.String()))) {
			t.Errorf("no line %q in /metrics", fmt.Sprintf("# TYPE %s %s", name, strings.ToLower(wantType.String())))
		}
		for _, m := range f.Metric {
			var names []string
			for _, lp := range m.Label {
				names = append(names, lp.GetName())
			}
			sort.Strings(names)
			if !slices.Equal(names, labels[name]) && !(len(names) == 0 && len(labels[name]) == 0) {
				t.Errorf("%s: labels %q, want %q", name, names, labels[name])
			}
		}
	}

	wantSamples := map[string][]sample{
		NameRecordsIn:          {{"stream=logins", 1}, {"stream=transactions", 3}},
		NameRecordsOut:         {{"kind=decision", 2}, {"kind=dlq", 1}},
		NameDLQ:                {{"reason_class=decode,stream=transactions", 1}},
		NameWatermark:          {{"task=3", 1_700_000_000}},
		NameEventTimeLag:       {{"task=3", 0.25}},
		NameConsumerLag:        {{"partition=3,topic=transactions", 42}},
		NameCheckpointDuration: {{"", 1}}, // histograms: the count
		NameCheckpointBytes:    {{"", 1}},
		NameCheckpointFailures: {{"", 1}},
		NameBackpressure:       {{"task=3", 1.5}},
		NameAsyncInflight:      {{"", 2}},
		NameAsyncTimeouts:      {{"enrichment=profile", 1}},
		NameAsyncFallbacks:     {{"enrichment=profile", 1}},
		NamePartialMatches:     {{"pattern=ato", 4}},
		NamePartialsDropped:    {{"pattern=ato", 2}},
		NameDecisionLatency:    {{"source=kafka", 1}},
		NameRuleHits:           {{"mode=active,rule=many_ips", 1}, {"mode=shadow,rule=many_ips", 2}},
		NameRuleErrors:         {{"rule=many_ips", 1}},
		NameRulesQuarantined:   {{"rule=slow", 1}},
		NameDecisions:          {{"action=block", 1}},
		NameHTTPRequests:       {{"route=GET /v1/entities/{key},status=404", 1}},
		NameHTTPDuration:       {{"route=GET /v1/entities/{key}", 1}},
		NameForwarded:          {{"outcome=ok,route=POST /v1/decisions", 1}},
		NameForwardDuration:    {{"route=POST /v1/decisions", 1}},
		NameOwnershipChanges:   {{"", 2}},
	}
	if len(wantSamples) != len(MetricNames) {
		t.Errorf("the test checks %d families, MetricNames has %d", len(wantSamples), len(MetricNames))
	}
	for name, want := range wantSamples {
		f := fams[name]
		if f == nil {
			continue
		}
		var got []sample
		for _, m := range f.Metric {
			got = append(got, sample{labelString(m), value(m)})
		}
		sort.Slice(got, func(i, j int) bool { return got[i].labels < got[j].labels })
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", name, got, want)
		}
	}

	// Histogram sums and the bucket edges the bars are read at (docs/design.md "Bars").
	for _, c := range []struct {
		name string
		sum  float64
	}{{NameCheckpointDuration, 0.5}, {NameCheckpointBytes, 2048}, {NameDecisionLatency, 0.0015}} {
		if f := fams[c.name]; f != nil {
			if got := f.Metric[0].GetHistogram().GetSampleSum(); got != c.sum {
				t.Errorf("%s_sum = %v, want %v", c.name, got, c.sum)
			}
		}
	}
	for _, line := range []string{
		`vigil_decision_latency_seconds_bucket{source="kafka",le="0.001"} 0`,
		`vigil_decision_latency_seconds_bucket{source="kafka",le="0.002"} 1`,
		`vigil_decision_latency_seconds_bucket{source="kafka",le="0.0001"} 0`,
		`vigil_decision_latency_seconds_bucket{source="kafka",le="1"} 1`,
		`vigil_checkpoint_bytes_bucket{le="1024"} 0`,
		`vigil_checkpoint_bytes_bucket{le="4096"} 1`,
		`vigil_records_in_total{stream="transactions"} 3`,
		`vigil_watermark_timestamp_seconds{task="3"} 1.7e+09`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no line %q in /metrics", line)
		}
	}

	// The resource, and the runtime and process collectors.
	if !strings.Contains(body, `service_name="vigil"`) || !strings.Contains(body, `service_version="1.2.3"`) {
		t.Errorf("target_info lacks service name or version:\n%s", grepLines(body, "target_info"))
	}
	for _, name := range []string{"target_info", "go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	// No otel_scope_* labels: the exporter's scope info is off.
	if strings.Contains(body, "otel_scope_") {
		t.Errorf("scope labels in /metrics:\n%s", grepLines(body, "otel_scope_"))
	}
}

// TestNoUserKeyLabels checks that no label is named for a user, entity or
// transaction, and that a user key and a transaction ID that went through
// the instrumented paths (an HTTP path, a decision span) appear nowhere.
func TestNoUserKeyLabels(t *testing.T) {
	tel := newTestTelemetry(t)
	recordAll(t, tel)
	body := scrape(t, tel)
	for _, s := range []string{userKey, decisionID} {
		if strings.Contains(body, s) {
			t.Errorf("%q appears in /metrics:\n%s", s, grepLines(body, s))
		}
	}
	forbidden := []string{"user", "user_id", "key", "entity", "entity_key", "id", "tx_id", "transaction_id", "path", "url"}
	for name, labels := range MetricLabels() {
		for _, l := range labels {
			if slices.Contains(forbidden, l) {
				t.Errorf("%s has label %q", name, l)
			}
		}
	}
	for name, f := range parse(t, body) {
		if !strings.HasPrefix(name, "vigil_") {
			continue
		}
		for _, m := range f.Metric {
			for _, lp := range m.Label {
				if slices.Contains(forbidden, lp.GetName()) {
					t.Errorf("%s has label %q", name, lp.GetName())
				}
			}
		}
	}
}

func TestMetricNamesConsistent(t *testing.T) {
	labels := MetricLabels()
	seen := map[string]bool{}
	for _, n := range MetricNames {
		if seen[n] {
			t.Errorf("%s twice in MetricNames", n)
		}
		seen[n] = true
		if _, ok := labels[n]; !ok {
			t.Errorf("%s has no entry in MetricLabels", n)
		}
		if !strings.HasPrefix(n, "vigil_") {
			t.Errorf("%s lacks the vigil_ prefix", n)
		}
	}
	if len(labels) != len(MetricNames) {
		t.Errorf("MetricLabels has %d names, MetricNames %d", len(labels), len(MetricNames))
	}
	for n, ls := range labels {
		if !slices.IsSorted(ls) {
			t.Errorf("labels of %s not sorted: %q", n, ls)
		}
	}
}

// TestLabelOverflow checks that an unbounded label (a caller bug) is capped.
func TestLabelOverflow(t *testing.T) {
	tel := newTestTelemetry(t)
	m := tel.Metrics()
	for i := range maxLabelSets + 50 {
		m.RecordsIn(fmt.Sprintf("s%d", i), 1)
	}
	f := parse(t, scrape(t, tel))[NameRecordsIn]
	if f == nil {
		t.Fatal("no vigil_records_in_total")
	}
	if got := len(f.Metric); got != maxLabelSets+1 {
		t.Errorf("%d series, want %d", got, maxLabelSets+1)
	}
	var other float64
	for _, s := range f.Metric {
		if labelString(s) == "stream="+overflowValue {
			other = value(s)
		}
	}
	if other != 50 {
		t.Errorf(`stream="other" = %v, want 50`, other)
	}
}

// TestObserveUnregister checks that unregistered task gauges disappear.
func TestObserveUnregister(t *testing.T) {
	tel := newTestTelemetry(t)
	un, err := tel.Metrics().ObserveTasks(func(observe func(int32, int64, int64)) { observe(7, 1000, 5) })
	if err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, tel); !strings.Contains(body, `vigil_watermark_timestamp_seconds{task="7"} 1`+"\n") {
		t.Fatalf("task 7 watermark missing:\n%s", grepLines(body, "vigil_watermark_timestamp_seconds"))
	}
	if err := un(); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, tel); strings.Contains(body, `vigil_watermark_timestamp_seconds{task="7"}`) {
		t.Errorf("task 7 still reported after unregister:\n%s", grepLines(body, "vigil_watermark_timestamp_seconds"))
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.RecordsIn("s", 1)
	m.RuleHit("r", "active")
	m.DecisionLatency("api", time.Millisecond)
	m.Checkpoint(time.Second, 1, nil)
	m.HTTPRequest("/", 200, time.Millisecond)
	un, err := m.ObserveTasks(func(func(int32, int64, int64)) {})
	if err != nil || un() != nil {
		t.Errorf("ObserveTasks on nil: %v", err)
	}
}

// TestHotPathAllocs pins 0 allocations per call in steady state.
func TestHotPathAllocs(t *testing.T) {
	tel := newTestTelemetry(t)
	m := tel.Metrics()
	for name, f := range map[string]func(){
		"RecordsIn":       func() { m.RecordsIn("transactions", 1) },
		"RuleHit":         func() { m.RuleHit("many_ips", "active") },
		"DecisionLatency": func() { m.DecisionLatency("kafka", time.Millisecond) },
		"DLQ":             func() { m.DLQ("transactions", ReasonDecode) },
		"Decision":        func() { m.Decision("allow") },
		"PartialMatches":  func() { m.PartialMatches("ato", 1) },
		"StartDecision": func() {
			_, s := tel.StartDecision(t.Context(), "transactions", "tx1")
			s.End()
		},
	} {
		f() // warm the label cache
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.Label {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// value is a counter's or gauge's value, or a histogram's count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUnlabelledCountersStartAtZero: counters without labels are reported
// before their first measurement, so that alerts on increase() work from
// the start.
func TestUnlabelledCountersStartAtZero(t *testing.T) {
	body := scrape(t, newTestTelemetry(t))
	for _, line := range []string{"vigil_checkpoint_failures_total 0", "vigil_async_inflight 0"} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no line %q in a fresh /metrics", line)
		}
	}
}

// TestConcurrentRecordAndScrape records from several goroutines, new label
// values included, while /metrics is scraped; with -race it checks the
// label cache and the collection callback. The totals must be exact.
func TestConcurrentRecordAndScrape(t *testing.T) {
	tel := newTestTelemetry(t)
	m := tel.Metrics()
	const goroutines, per = 4, 2000
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range per {
				m.RecordsIn("transactions", 1)
				m.RuleHit(fmt.Sprintf("rule_%d", i%50), "active")
				m.PartialMatches("ato", 1)
				m.PartialMatches("ato", -1)
				m.Backpressure(int32(g), time.Millisecond)
			}
		}()
	}
	for range 5 {
		parse(t, scrape(t, tel))
	}
	for range goroutines {
		<-done
	}
	fams := parse(t, scrape(t, tel))
	if got := fams[NameRecordsIn].Metric[0].GetCounter().GetValue(); got != goroutines*per {
		t.Errorf("records in = %v, want %d", got, goroutines*per)
	}
	if got := len(fams[NameRuleHits].Metric); got != 50 {
		t.Errorf("%d rule series, want 50", got)
	}
	var hits float64
	for _, s := range fams[NameRuleHits].Metric {
		hits += s.GetCounter().GetValue()
	}
	if hits != goroutines*per {
		t.Errorf("rule hits = %v, want %d", hits, goroutines*per)
	}
	if got := fams[NamePartialMatches].Metric[0].GetGauge().GetValue(); got != 0 {
		t.Errorf("partial matches = %v, want 0", got)
	}
	for _, s := range fams[NameBackpressure].Metric {
		if got := s.GetCounter().GetValue(); got != per*0.001 {
			t.Errorf("backpressure %s = %v, want %v", labelString(s), got, per*0.001)
		}
	}
}

// TestPromtoolCheckMetrics runs Prometheus' own linter on a scrape with
// every metric recorded: names in base units, counters ending in _total,
// help text on every family. ./scripts/test installs promtool (Debian's
// prometheus package).
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (./scripts/test installs it: apt-get install prometheus)")
	}
	tel := newTestTelemetry(t)
	recordAll(t, tel)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape(t, tel))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
