// Package telemetry is Vigil's observability adapter: the only package that
// imports OpenTelemetry and the Prometheus client. It builds the meter and
// tracer providers (New), holds every metric instrument behind small typed
// methods (Metrics), instruments the HTTP API (HTTPMiddleware), starts
// decision spans (StartDecision) and builds the slog logger (NewLogger).
// Core packages report through their own hook structs; cmd/vigil wires those
// hooks to the methods here.
//
// # Metrics
//
// /metrics (MetricsHandler) serves a Prometheus registry of its own (never
// the global default) holding the OTel exporter, the Go runtime collector
// and the process collector. Instruments are named with their Prometheus
// names and the exporter adds no unit or _total suffix and no otel_scope_*
// labels, so the names below appear exactly so in /metrics. They are the
// contract of the Grafana dashboard and the alerts; MetricNames lists them
// and MetricLabels gives their label names.
//
//	name                                   type       labels
//	vigil_records_in_total                 counter    stream
//	vigil_records_out_total                counter    kind: decision match timeout join window late dlq
//	vigil_dlq_total                        counter    stream, reason_class: decode key time id size rule unknown_stream skew other
//	vigil_watermark_timestamp_seconds      gauge      task (Unix time, ms precision)
//	vigil_event_time_lag_seconds           gauge      task (processing time − watermark)
//	vigil_consumer_lag_records             gauge      topic, partition
//	vigil_checkpoint_duration_seconds      histogram  -
//	vigil_checkpoint_bytes                 histogram  -
//	vigil_checkpoint_failures_total        counter    -
//	vigil_backpressure_seconds_total       counter    task
//	vigil_async_inflight                   gauge      -
//	vigil_async_timeouts_total             counter    enrichment
//	vigil_async_fallbacks_total            counter    enrichment
//	vigil_partial_matches                  gauge      pattern
//	vigil_partials_dropped_total           counter    pattern
//	vigil_decision_latency_seconds         histogram  source: kafka api
//	vigil_rule_hits_total                  counter    rule, mode: active shadow
//	vigil_rule_errors_total                counter    rule
//	vigil_rules_quarantined_total          counter    rule
//	vigil_decisions_total                  counter    action: allow review block
//	vigil_http_requests_total              counter    route, status
//	vigil_http_request_duration_seconds    histogram  route
//	vigil_forwarded_requests_total         counter    route, outcome: ok unavailable
//	vigil_forward_duration_seconds         histogram  route
//	vigil_ownership_changes_total          counter    -
//
// Histograms expose NAME_bucket{le}, NAME_sum and NAME_count. Latency
// buckets run from 0.1 ms to 1 s on a 1-2-5 scale (edges at the 2 ms and
// 20 ms bars of docs/design.md "Bars"); checkpoint durations from 5 ms to
// 60 s; checkpoint sizes from 1 KiB to 1 GiB by powers of 4. target_info carries the
// resource: service_name="vigil", service_version.
//
// Labels hold values from small fixed sets. Never a user ID, an entity key
// or a transaction ID: each distinct value is a new series kept for the
// life of the process (and in Prometheus for its retention). IDs belong on
// spans (StartDecision) and in logs. The HTTP route label is the route
// pattern, never the path, which for /v1/entities/{key} holds a user key.
// As a guard, an instrument that has seen 1000 label sets counts any
// further one under the value "other".
//
// # Cost
//
// Label sets are converted to OTel options once per distinct value and
// cached in a copy-on-write map read with one atomic load. Counters and
// up-down counters are summed in an atomic per series and handed to the
// SDK through one callback at collection, so a hot-path call (RecordsIn,
// RuleHit, Decision) is a map lookup and an atomic add, about 10-20 ns and
// no allocation. Histograms (DecisionLatency) go through the SDK, about
// 100 ns and no allocation. Gauges that belong to a task (watermark, lag)
// are read at collection through ObserveTasks and ObserveConsumerLag.
//
// # Traces
//
// When OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set (and OTEL_TRACES_EXPORTER is not "none"), spans go through a batch
// processor to an OTLP/HTTP protobuf exporter configured by the standard
// OTEL_EXPORTER_OTLP_* variables, sampled per OTEL_TRACES_SAMPLER (default
// parent-based always-on: at hundreds of thousands of events a second set
// parentbased_traceidratio). Otherwise the tracer is a no-op, nothing
// touches the network and StartDecision costs nothing. Incoming HTTP
// requests continue the W3C traceparent of the caller either way.
//
// # Concurrency and ownership
//
// Everything here is safe for concurrent use. No method blocks on I/O
// except Shutdown, which the owner (cmd/vigil) calls once, after the
// components that record have stopped: it flushes buffered spans and stops
// both providers. The only goroutine started is the batch span processor's
// (when traces are exported), stopped by Shutdown. Callbacks given to
// ObserveTasks and ObserveConsumerLag run on the scraping goroutine. The
// label caches have one lock each, taken only on a miss and never together
// with another. New sets no OpenTelemetry global.
package telemetry
