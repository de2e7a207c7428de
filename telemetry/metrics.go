package telemetry

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The Prometheus metric family names Vigil exports: the contract of the
// Grafana dashboard and the alerts. Names are given to OTel exactly as they
// appear in /metrics; the exporter adds no unit or _total suffix (see New).
// Histograms expose the usual _bucket, _sum and _count series under the
// family name.
const (
	NameRecordsIn          = "vigil_records_in_total"
	NameRecordsOut         = "vigil_records_out_total"
	NameDLQ                = "vigil_dlq_total"
	NameWatermark          = "vigil_watermark_timestamp_seconds"
	NameEventTimeLag       = "vigil_event_time_lag_seconds"
	NameConsumerLag        = "vigil_consumer_lag_records"
	NameCheckpointDuration = "vigil_checkpoint_duration_seconds"
	NameCheckpointBytes    = "vigil_checkpoint_bytes"
	NameCheckpointFailures = "vigil_checkpoint_failures_total"
	NameBackpressure       = "vigil_backpressure_seconds_total"
	NameAsyncInflight      = "vigil_async_inflight"
	NameAsyncTimeouts      = "vigil_async_timeouts_total"
	NameAsyncFallbacks     = "vigil_async_fallbacks_total"
	NamePartialMatches     = "vigil_partial_matches"
	NamePartialsDropped    = "vigil_partials_dropped_total"
	NameDecisionLatency    = "vigil_decision_latency_seconds"
	NameRuleHits           = "vigil_rule_hits_total"
	NameRuleErrors         = "vigil_rule_errors_total"
	NameRulesQuarantined   = "vigil_rules_quarantined_total"
	NameDecisions          = "vigil_decisions_total"
	NameHTTPRequests       = "vigil_http_requests_total"
	NameHTTPDuration       = "vigil_http_request_duration_seconds"
	NameForwarded          = "vigil_forwarded_requests_total"
	NameForwardDuration    = "vigil_forward_duration_seconds"
	NameOwnershipChanges   = "vigil_ownership_changes_total"
)

// MetricNames lists every Vigil metric family name exactly as it appears in
// /metrics, in the order of the package documentation. Tests and the
// deployment dashboard test check against it; do not modify it.
var MetricNames = []string{
	NameRecordsIn, NameRecordsOut, NameDLQ,
	NameWatermark, NameEventTimeLag, NameConsumerLag,
	NameCheckpointDuration, NameCheckpointBytes, NameCheckpointFailures,
	NameBackpressure,
	NameAsyncInflight, NameAsyncTimeouts, NameAsyncFallbacks,
	NamePartialMatches, NamePartialsDropped,
	NameDecisionLatency,
	NameRuleHits, NameRuleErrors, NameRulesQuarantined,
	NameDecisions,
	NameHTTPRequests, NameHTTPDuration,
	NameForwarded, NameForwardDuration, NameOwnershipChanges,
}

// MetricLabels returns, for every name of MetricNames, its label names in
// sorted order (histograms also carry "le" on their _bucket series). The map
// is new on every call.
func MetricLabels() map[string][]string {
	return map[string][]string{
		NameRecordsIn:          {"stream"},
		NameRecordsOut:         {"kind"},
		NameDLQ:                {"reason_class", "stream"},
		NameWatermark:          {"task"},
		NameEventTimeLag:       {"task"},
		NameConsumerLag:        {"partition", "topic"},
		NameCheckpointDuration: {},
		NameCheckpointBytes:    {},
		NameCheckpointFailures: {},
		NameBackpressure:       {"task"},
		NameAsyncInflight:      {},
		NameAsyncTimeouts:      {"enrichment"},
		NameAsyncFallbacks:     {"enrichment"},
		NamePartialMatches:     {"pattern"},
		NamePartialsDropped:    {"pattern"},
		NameDecisionLatency:    {"source"},
		NameRuleHits:           {"mode", "rule"},
		NameRuleErrors:         {"rule"},
		NameRulesQuarantined:   {"rule"},
		NameDecisions:          {"action"},
		NameHTTPRequests:       {"route", "status"},
		NameHTTPDuration:       {"route"},
		NameForwarded:          {"outcome", "route"},
		NameForwardDuration:    {"route"},
		NameOwnershipChanges:   {},
	}
}

// Bucket boundaries (seconds or bytes) of the histograms.
var (
	// latencyBuckets span 0.1 ms … 1 s on a 1-2-5 scale, with edges at the
	// bars of docs/design.md "Bars": 2 ms (API p99) and 20 ms (Kafka p99).
	latencyBuckets    = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}
	checkpointBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// sizeBuckets are powers of 4 from 1 KiB to 1 GiB.
	sizeBuckets = []float64{1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30}
)

// Metrics holds every Vigil instrument, created once by NewMetrics, with a
// small typed method per measurement. Label sets are built once per distinct
// label value and cached. Counters and up-down counters are summed here, in
// an atomic per series, and handed to the SDK on every collection: a call
// costs a lock-free map lookup and an atomic add (about 10 ns). Histograms
// go through the SDK (about 100 ns). In steady state nothing allocates.
//
// All methods are safe for concurrent use, and all are no-ops on a nil
// *Metrics, so that a component built without telemetry needs no checks.
//
// Labels take values from small fixed sets (stream, rule, pattern,
// enrichment, route, …). Never pass a user ID, entity key or transaction ID
// as a label value: each distinct value is a new time series kept for the
// life of the process. After 1000 distinct label sets on one instrument,
// further values are counted under the label value "other".
type Metrics struct {
	meter metric.Meter

	recordsIn          counter[string] // stream
	recordsOut         counter[string] // kind
	dlq                counter[dlqKey]
	checkpointFailures counter[noLabels]
	backpressure       counter[int32] // task; nanoseconds
	asyncInflight      counter[noLabels]
	asyncTimeouts      counter[string] // enrichment
	asyncFallbacks     counter[string] // enrichment
	partialMatches     counter[string] // pattern
	partialsDropped    counter[string] // pattern
	ruleHits           counter[pair]   // rule, mode
	ruleErrors         counter[string] // rule
	rulesQuarantined   counter[string] // rule
	decisions          counter[string] // action
	httpRequests       counter[routeStatus]
	forwarded          counter[pair] // route, outcome
	ownershipChanges   counter[noLabels]

	checkpointDuration metric.Float64Histogram
	checkpointBytes    metric.Int64Histogram
	decisionLatency    metric.Float64Histogram
	httpDuration       metric.Float64Histogram
	forwardDuration    metric.Float64Histogram
	byNone             *labelCache[noLabels]
	bySource           *labelCache[string] // source
	byRoute            *labelCache[string] // route

	watermark    metric.Float64ObservableGauge
	eventTimeLag metric.Float64ObservableGauge
	consumerLag  metric.Int64ObservableGauge
	byTask       *labelCache[int32] // task
	byPartition  *labelCache[topicPartition]
}

type dlqKey struct {
	stream string
	reason DLQReason
}

type topicPartition struct {
	topic     string
	partition int32
}

type routeStatus struct {
	route  string
	status int
}

// scopeName is the instrumentation scope of every Vigil instrument.
const scopeName = "github.com/vigil-cep/vigil/telemetry"

// NewMetrics creates every instrument on a meter of mp. Any MeterProvider
// works: New passes its Prometheus-backed one, and a test of another
// package can pass go.opentelemetry.io/otel/metric/noop's. It fails only if
// the provider refuses an instrument or the collection callback.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := &Metrics{meter: mp.Meter(scopeName)}
	b := builder{meter: m.meter}

	m.recordsIn = counter[string]{stringCache("stream"),
		b.counter(NameRecordsIn, "{record}", "Input records read, by stream."), nil}
	m.recordsOut = counter[string]{stringCache("kind"),
		b.counter(NameRecordsOut, "{record}", "Output records written, by kind: decision, match, timeout, join, window, late, dlq."), nil}
	m.dlq = counter[dlqKey]{newLabelCache(func(k dlqKey) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("stream", k.stream), attribute.String("reason_class", k.reason.String())}
	}, "stream", "reason_class"),
		b.counter(NameDLQ, "{record}", "Records sent to the dead-letter queue, by stream and reason class."), nil}
	m.checkpointFailures = counter[noLabels]{unlabelled(),
		b.counter(NameCheckpointFailures, "{checkpoint}", "Checkpoints that failed."), nil}
	m.backpressure = counter[int32]{taskCache(), nil,
		b.floatCounter(NameBackpressure, "s", "Time a task's input partitions spent paused because its queue was full.")}
	m.asyncInflight = counter[noLabels]{unlabelled(),
		b.upDown(NameAsyncInflight, "{request}", "Async enrichment lookups in flight."), nil}
	m.asyncTimeouts = counter[string]{stringCache("enrichment"),
		b.counter(NameAsyncTimeouts, "{request}", "Async enrichment lookups that timed out, by enrichment."), nil}
	m.asyncFallbacks = counter[string]{stringCache("enrichment"),
		b.counter(NameAsyncFallbacks, "{request}", "Async enrichment lookups answered with the fallback value, by enrichment."), nil}
	m.partialMatches = counter[string]{stringCache("pattern"),
		b.upDown(NamePartialMatches, "{match}", "Open partial matches, by pattern."), nil}
	m.partialsDropped = counter[string]{stringCache("pattern"),
		b.counter(NamePartialsDropped, "{match}", "Partial matches dropped over the per-key cap, by pattern."), nil}
	m.ruleHits = counter[pair]{pairCache("rule", "mode"),
		b.counter(NameRuleHits, "{hit}", "Rule matches, by rule and mode (active, shadow)."), nil}
	m.ruleErrors = counter[string]{stringCache("rule"),
		b.counter(NameRuleErrors, "{error}", "Rule evaluations that failed at run time, by rule."), nil}
	m.rulesQuarantined = counter[string]{stringCache("rule"),
		b.counter(NameRulesQuarantined, "{quarantine}", "Rules the service disabled because an evaluation ran longer than the rule time limit, by rule."), nil}
	m.decisions = counter[string]{stringCache("action"),
		b.counter(NameDecisions, "{decision}", "Decisions made, by action: allow, review, block."), nil}
	m.httpRequests = counter[routeStatus]{newLabelCache(func(k routeStatus) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("route", k.route), attribute.String("status", strconv.Itoa(k.status))}
	}, "route", "status"),
		b.counter(NameHTTPRequests, "{request}", "HTTP requests served, by route pattern and status code."), nil}
	m.forwarded = counter[pair]{pairCache("route", "outcome"),
		b.counter(NameForwarded, "{request}", "API requests forwarded to the instance that owns their key, by route pattern and outcome: ok (the owner answered), unavailable (it could not be reached)."), nil}
	m.ownershipChanges = counter[noLabels]{unlabelled(),
		b.counter(NameOwnershipChanges, "{partition}", "Partitions seen to change owner in the consumer group."), nil}
	m.forwardDuration = b.histogram(NameForwardDuration, "s", "Time to forward an API request to its key's owner and read its answer, by route pattern.", latencyBuckets)

	m.checkpointDuration = b.histogram(NameCheckpointDuration, "s", "Time to write a checkpoint, sinks flushed included.", checkpointBuckets)
	m.checkpointBytes = b.intHistogram(NameCheckpointBytes, "By", "Size of a written checkpoint.", sizeBuckets)
	m.decisionLatency = b.histogram(NameDecisionLatency, "s", "Time from receiving an event to its decision, by source: kafka, api.", latencyBuckets)
	m.httpDuration = b.histogram(NameHTTPDuration, "s", "HTTP request duration, by route pattern.", latencyBuckets)
	m.byNone = unlabelled()
	m.bySource = stringCache("source")
	m.byRoute = stringCache("route")

	// In seconds, Prometheus' base unit, with millisecond precision.
	m.watermark = b.floatGauge(NameWatermark, "s", "Task watermark, as a Unix time in seconds.")
	m.eventTimeLag = b.floatGauge(NameEventTimeLag, "s", "Processing time minus task watermark, in seconds.")
	m.consumerLag = b.gauge(NameConsumerLag, "{record}", "Records between the committed offset and the end of each input partition.")
	m.byTask = taskCache()
	m.byPartition = newLabelCache(func(k topicPartition) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("topic", k.topic), attribute.String("partition", strconv.FormatInt(int64(k.partition), 10))}
	}, "topic", "partition")
	if b.err != nil {
		return nil, b.err
	}

	counters := []observable{&m.recordsIn, &m.recordsOut, &m.dlq, &m.checkpointFailures, &m.backpressure,
		&m.asyncInflight, &m.asyncTimeouts, &m.asyncFallbacks, &m.partialMatches, &m.partialsDropped,
		&m.ruleHits, &m.ruleErrors, &m.rulesQuarantined, &m.decisions, &m.httpRequests, &m.forwarded, &m.ownershipChanges}
	if _, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, c := range counters {
			c.observe(o)
		}
		return nil
	}, b.observables...); err != nil {
		return nil, fmt.Errorf("telemetry: register counter callback: %w", err)
	}
	return m, nil
}

func taskCache() *labelCache[int32] {
	return newLabelCache(func(t int32) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("task", strconv.FormatInt(int64(t), 10))}
	}, "task")
}

// builder creates instruments and keeps the first error, so that NewMetrics
// reads as a list. observables collects the counters it made.
type builder struct {
	meter       metric.Meter
	err         error
	observables []metric.Observable
}

func (b *builder) keep(name string, err error) {
	if err != nil && b.err == nil {
		b.err = fmt.Errorf("telemetry: create instrument %s: %w", name, err)
	}
}

func (b *builder) counter(name, unit, help string) metric.Int64Observable {
	c, err := b.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(help))
	b.keep(name, err)
	b.observables = append(b.observables, c)
	return c
}

func (b *builder) floatCounter(name, unit, help string) metric.Float64Observable {
	c, err := b.meter.Float64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(help))
	b.keep(name, err)
	b.observables = append(b.observables, c)
	return c
}

func (b *builder) upDown(name, unit, help string) metric.Int64Observable {
	c, err := b.meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(help))
	b.keep(name, err)
	b.observables = append(b.observables, c)
	return c
}

// gauge creates an observable gauge; its callbacks are registered by
// ObserveTasks and ObserveConsumerLag.
func (b *builder) gauge(name, unit, help string) metric.Int64ObservableGauge {
	g, err := b.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(help))
	b.keep(name, err)
	return g
}

func (b *builder) floatGauge(name, unit, help string) metric.Float64ObservableGauge {
	g, err := b.meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(help))
	b.keep(name, err)
	return g
}

func (b *builder) histogram(name, unit, help string, buckets []float64) metric.Float64Histogram {
	h, err := b.meter.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithExplicitBucketBoundaries(buckets...))
	b.keep(name, err)
	return h
}

func (b *builder) intHistogram(name, unit, help string, buckets []float64) metric.Int64Histogram {
	h, err := b.meter.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithExplicitBucketBoundaries(buckets...))
	b.keep(name, err)
	return h
}

// RecordsIn counts n input records read from stream (n <= 0 is ignored).
// Count a fetched batch at once where one is at hand.
func (m *Metrics) RecordsIn(stream string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.recordsIn.add(stream, n)
}

// RecordsOut counts n output records of kind: "decision", "match",
// "timeout", "join", "window", "late" or "dlq" (n <= 0 is ignored).
func (m *Metrics) RecordsOut(kind string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.recordsOut.add(kind, n)
}

// DLQ counts one record of stream sent to the dead-letter queue for reason
// (see ClassifyDLQ). It is independent of RecordsOut("dlq", …), which the
// sink counts when it writes.
func (m *Metrics) DLQ(stream string, reason DLQReason) {
	if m == nil {
		return
	}
	if reason >= numReasons {
		reason = ReasonOther
	}
	m.dlq.add(dlqKey{stream, reason}, 1)
}

// Checkpoint records one checkpoint attempt: on success its duration and
// size in bytes, on failure (err != nil) only vigil_checkpoint_failures_total.
func (m *Metrics) Checkpoint(d time.Duration, size int64, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.checkpointFailures.add(noLabels{}, 1)
		return
	}
	none := m.byNone.get(noLabels{}).rec
	m.checkpointDuration.Record(context.Background(), d.Seconds(), none...)
	m.checkpointBytes.Record(context.Background(), size, none...)
}

// Backpressure adds d, a time task's partitions spent paused, to
// vigil_backpressure_seconds_total. Report each pause when it ends, and
// for a long pause also while it lasts (the time since the last report), so
// that a stuck task shows up before it resumes.
func (m *Metrics) Backpressure(task int32, d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.backpressure.add(task, int64(d))
}

// AsyncInflight adds delta (+1 when a lookup starts, -1 when it ends, -n
// when a task drops its in-flight lookups) to vigil_async_inflight.
func (m *Metrics) AsyncInflight(delta int64) {
	if m == nil {
		return
	}
	m.asyncInflight.add(noLabels{}, delta)
}

// AsyncTimeout counts one lookup of enrichment that timed out.
func (m *Metrics) AsyncTimeout(enrichment string) {
	if m == nil {
		return
	}
	m.asyncTimeouts.add(enrichment, 1)
}

// AsyncFallback counts one lookup of enrichment answered with its fallback.
func (m *Metrics) AsyncFallback(enrichment string) {
	if m == nil {
		return
	}
	m.asyncFallbacks.add(enrichment, 1)
}

// PartialMatches adds delta to the open partial matches of pattern: +n as
// runs open, -n as they complete, time out or are dropped, and -n for all of
// a task's runs when the task closes (its partitions are revoked).
func (m *Metrics) PartialMatches(pattern string, delta int64) {
	if m == nil {
		return
	}
	m.partialMatches.add(pattern, delta)
}

// PartialsDropped counts n partial matches of pattern dropped over the
// per-key cap (n <= 0 is ignored).
func (m *Metrics) PartialsDropped(pattern string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.partialsDropped.add(pattern, n)
}

// DecisionLatency records the time from receiving an event to its decision;
// source is "kafka" or "api".
func (m *Metrics) DecisionLatency(source string, d time.Duration) {
	if m == nil {
		return
	}
	m.decisionLatency.Record(context.Background(), d.Seconds(), m.bySource.get(source).rec...)
}

// RuleHit counts one match of rule in mode ("active" or "shadow").
func (m *Metrics) RuleHit(rule, mode string) {
	if m == nil {
		return
	}
	m.ruleHits.add(pair{rule, mode}, 1)
}

// RuleError counts one run-time failure of rule.
func (m *Metrics) RuleError(rule string) {
	if m == nil {
		return
	}
	m.ruleErrors.add(rule, 1)
}

// RuleQuarantined counts one quarantine of rule: the service set it disabled
// after an evaluation ran longer than the rule time limit.
func (m *Metrics) RuleQuarantined(rule string) {
	if m == nil {
		return
	}
	m.rulesQuarantined.add(rule, 1)
}

// Decision counts one decision with action ("allow", "review", "block").
func (m *Metrics) Decision(action string) {
	if m == nil {
		return
	}
	m.decisions.add(action, 1)
}

// HTTPRequest records one served request: route is the route pattern
// ("/v1/entities/{key}"), never the raw path, which may hold a user key.
// HTTPMiddleware calls it; a server that does not use the middleware can.
func (m *Metrics) HTTPRequest(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.httpRequests.add(routeStatus{route, status}, 1)
	m.httpDuration.Record(context.Background(), d.Seconds(), m.byRoute.get(route).rec...)
}

// Forwarded counts one API request forwarded to its key's owner: outcome
// "ok" when the owner answered (whatever its status), "unavailable" when it
// could not be reached in time; d is the round trip.
func (m *Metrics) Forwarded(route, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.forwarded.add(pair{route, outcome}, 1)
	m.forwardDuration.Record(context.Background(), d.Seconds(), m.byRoute.get(route).rec...)
}

// OwnershipChanges counts n partitions seen to change owner in the group.
func (m *Metrics) OwnershipChanges(n int) {
	if m == nil {
		return
	}
	m.ownershipChanges.add(noLabels{}, int64(n))
}

// NoWatermark is the watermark of a task that has seen no event yet (the
// engine's stream.MinTime); ObserveTasks reports nothing for such a task.
const NoWatermark = math.MinInt64

// ObserveTasks registers f to report task gauges at every collection (every
// scrape of /metrics): f calls observe once per task it owns with the task
// (partition) number, its watermark in epoch ms, and its event-time lag in
// ms (processing time minus watermark). A task whose watermark is
// NoWatermark is skipped. f runs on the scraping goroutine, concurrently
// with the tasks, so it must read what it reports safely (atomics, or a
// copy the task publishes); it must not block.
//
// Unregister when the tasks go away (partitions revoked), or their last
// values are reported forever. It fails only on programmer misuse.
func (m *Metrics) ObserveTasks(f func(observe func(task int32, watermark, lagMillis int64))) (unregister func() error, err error) {
	if m == nil {
		return func() error { return nil }, nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f(func(task int32, watermark, lag int64) {
			if watermark == NoWatermark {
				return
			}
			a := m.byTask.get(task).obs
			o.ObserveFloat64(m.watermark, float64(watermark)/1e3, a...)
			o.ObserveFloat64(m.eventTimeLag, float64(lag)/1e3, a...)
		})
		return nil
	}, m.watermark, m.eventTimeLag)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register task gauges: %w", err)
	}
	return reg.Unregister, nil
}

// ObserveConsumerLag registers f to report, at every collection, the
// consumer lag in records of each input partition it knows. The same rules
// as ObserveTasks apply: f runs on the scraping goroutine, reads safely,
// does not block, and is unregistered when it no longer applies.
func (m *Metrics) ObserveConsumerLag(f func(observe func(topic string, partition int32, lag int64))) (unregister func() error, err error) {
	if m == nil {
		return func() error { return nil }, nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f(func(topic string, partition int32, lag int64) {
			o.ObserveInt64(m.consumerLag, lag, m.byPartition.get(topicPartition{topic, partition}).obs...)
		})
		return nil
	}, m.consumerLag)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register consumer lag gauge: %w", err)
	}
	return reg.Unregister, nil
}
