package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name resource attribute of every metric and span.
const ServiceName = "vigil"

// The environment variables that turn trace export on (either one), read by
// New; otlptracehttp reads them and the other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, compression, certificates) itself.
const (
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envTracesExporter     = "OTEL_TRACES_EXPORTER"
)

// Options configures New. The zero value is valid.
type Options struct {
	// Version is the service.version resource attribute (the build's
	// version); default "dev".
	Version string
}

// Telemetry owns Vigil's OpenTelemetry providers: a MeterProvider exported
// through Prometheus on a registry of its own, and a TracerProvider that
// exports over OTLP/HTTP when the environment asks for it and is a no-op
// otherwise. Its methods are safe for concurrent use. The owner calls
// Shutdown once, after the components that record into it have stopped.
//
// New sets no OpenTelemetry global (otel.SetTracerProvider and friends):
// components get the providers from here, so that tests can run several.
type Telemetry struct {
	reg        *prometheus.Registry
	mp         *sdkmetric.MeterProvider
	tp         trace.TracerProvider
	sdkTP      *sdktrace.TracerProvider // nil when tracing is off
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	metrics    *Metrics

	shutdown struct {
		once sync.Once
		err  error
	}
}

// New builds the providers and every instrument. Trace export is on when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// (and OTEL_TRACES_EXPORTER is not "none"): spans then go through a batch
// processor to the OTLP/HTTP (protobuf) exporter, sampled as
// OTEL_TRACES_SAMPLER says (default: parent-based, always on). Otherwise the
// tracer is a no-op and nothing touches the network. New itself does no
// I/O; errors come from an invalid exporter configuration or resource.
func New(opts Options) (*Telemetry, error) {
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	// resource.New with our attributes last: OTEL_RESOURCE_ATTRIBUTES may add
	// attributes but cannot rename the service.
	res, err := resource.New(context.Background(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(version)),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: build resource: %w", err)
	}

	t := &Telemetry{
		reg:        prometheus.NewRegistry(),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	// The live heap (go_gc_heap_live_bytes) besides the default memstats:
	// the state a process holds, against which its RSS and the soft memory
	// limit (internal/gctune.HeapLimit) are read.
	live := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	if err := t.reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(live))); err != nil {
		return nil, fmt.Errorf("telemetry: register Go collector: %w", err)
	}
	if err := t.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: register process collector: %w", err)
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(t.reg),
		// The instrument names are the Prometheus names already
		// ("vigil_records_in_total", "vigil_event_time_lag_seconds"): no unit or
		// _total suffix is added, so what the code says is what the
		// dashboard queries.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
		// No otel_scope_* labels on every series: there is one scope.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: create Prometheus exporter: %w", err)
	}
	t.mp = sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exp),
		sdkmetric.WithResource(res),
		// No measurement carries a span context (the hot-path methods take
		// none), so exemplars could never be filled: skip the check.
		sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter),
	)
	if t.metrics, err = NewMetrics(t.mp); err != nil {
		_ = t.mp.Shutdown(context.Background())
		return nil, err
	}

	if tracesExported() {
		// otlptracehttp reads the endpoint, headers, timeout, compression
		// and TLS settings from the standard variables; an http:// endpoint
		// means plain HTTP.
		te, err := otlptracehttp.New(context.Background())
		if err != nil {
			_ = t.mp.Shutdown(context.Background())
			return nil, fmt.Errorf("telemetry: create OTLP trace exporter: %w", err)
		}
		t.sdkTP = sdktrace.NewTracerProvider(sdktrace.WithBatcher(te), sdktrace.WithResource(res))
		t.tp = t.sdkTP
	} else {
		t.tp = noop.NewTracerProvider()
	}
	t.tracer = t.tp.Tracer(scopeName, trace.WithInstrumentationVersion(version))
	return t, nil
}

// tracesExported reports whether the environment asks for OTLP trace export.
func tracesExported() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(envTracesExporter)), "none") {
		return false
	}
	return os.Getenv(EnvOTLPEndpoint) != "" || os.Getenv(EnvOTLPTracesEndpoint) != ""
}

// Metrics returns the instruments, created once by New.
func (t *Telemetry) Metrics() *Metrics { return t.metrics }

// MeterProvider returns the provider behind Metrics, for libraries that
// take one (franz-go's kotel, go-redis' redisotel).
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// TracerProvider returns the tracer provider: the SDK's when traces are
// exported, a no-op one otherwise.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// Tracer returns Vigil's tracer.
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// Propagator returns the W3C trace-context and baggage propagator, to carry
// spans across HTTP requests and Kafka record headers.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// TracesExported reports whether spans are exported (an OTLP endpoint is
// configured), so that the caller can log where they go.
func (t *Telemetry) TracesExported() bool { return t.sdkTP != nil }

// Registry returns the Prometheus registry behind MetricsHandler, to add a
// collector of another library.
func (t *Telemetry) Registry() *prometheus.Registry { return t.reg }

// MetricsHandler serves the registry in the Prometheus text format (or
// its protobuf form when the scraper asks for it): Vigil's metrics, the Go
// runtime and process collectors, and target_info with the resource
// attributes. OpenMetrics is not offered: it would name counter families
// without _total in its TYPE lines (samples keep it), and with no exemplars
// it adds nothing, so the text always matches MetricNames.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{
		Registry:      t.reg, // counts its own errors in promhttp_metric_handler_errors_total
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Shutdown flushes the spans still buffered to the OTLP endpoint and stops
// both providers; later measurements and spans are dropped. It returns the
// providers' errors joined (a flush that ctx cut short among them). Calls
// after the first return the first's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdown.once.Do(func() {
		var errs []error
		if t.sdkTP != nil {
			if err := t.sdkTP.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: shut down tracer provider: %w", err))
			}
		}
		if err := t.mp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: shut down meter provider: %w", err))
		}
		t.shutdown.err = errors.Join(errs...)
	})
	return t.shutdown.err
}

// Span attribute keys of StartDecision.
const (
	AttrStream     = attribute.Key("vigil.stream")
	AttrDecisionID = attribute.Key("vigil.decision.id")
	AttrAction     = attribute.Key("vigil.decision.action")
)

// StartDecision starts a span "decide" for the decision of the event of
// stream with the given ID (the transaction ID: fine on a span, never a
// metric label), child of any span in ctx. The caller ends the span. When
// traces are not exported it returns ctx and a no-op span, allocating
// nothing, so it can stay on the Kafka path.
func (t *Telemetry) StartDecision(ctx context.Context, stream, id string) (context.Context, trace.Span) {
	if t.sdkTP == nil {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, "decide", trace.WithAttributes(AttrStream.String(stream), AttrDecisionID.String(id)))
}
