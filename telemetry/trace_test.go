package telemetry

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a loopback OTLP/HTTP trace receiver.
type collector struct {
	srv *httptest.Server
	mu  struct {
		sync.Mutex
		reqs  int
		paths []string
		spans []*tracepb.Span
		res   []*commonpb.KeyValue
		err   string
	}
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.mu.reqs++
		c.mu.paths = append(c.mu.paths, r.Method+" "+r.URL.Path)
		if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			c.mu.err = "Content-Type " + ct
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			c.mu.err = err.Error()
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			c.mu.err = "unmarshal: " + err.Error()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			c.mu.res = rs.GetResource().GetAttributes()
			for _, ss := range rs.ScopeSpans {
				c.mu.spans = append(c.mu.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			if s, ok := kv.Value.Value.(*commonpb.AnyValue_StringValue); ok {
				return s.StringValue
			}
			if i, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(i.IntValue, 10)
			}
		}
	}
	return ""
}

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID    = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + parentID + "-01"
)

func TestTracesExportedOverOTLP(t *testing.T) {
	for _, c := range []struct {
		env, suffix string
	}{
		{EnvOTLPEndpoint, ""},                 // the exporter appends /v1/traces
		{EnvOTLPTracesEndpoint, "/v1/traces"}, // used as is
	} {
		t.Run(c.env, func(t *testing.T) {
			col := newCollector(t)
			t.Setenv(EnvOTLPEndpoint, "")
			t.Setenv(EnvOTLPTracesEndpoint, "")
			t.Setenv(envTracesExporter, "")
			t.Setenv(c.env, col.srv.URL+c.suffix)
			tel, err := New(Options{Version: "1.2.3"})
			if err != nil {
				t.Fatal(err)
			}
			if !tel.TracesExported() {
				t.Fatal("TracesExported() = false with an endpoint set")
			}

			// A request carrying a traceparent, whose handler decides.
			h := tel.HTTPMiddleware(func(r *http.Request) string { return "/v1/decisions" })(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, span := tel.StartDecision(r.Context(), "transactions", "tx-1")
					span.End()
					w.WriteHeader(http.StatusCreated)
				}))
			req := httptest.NewRequest(http.MethodPost, "/v1/decisions", nil)
			req.Header.Set("traceparent", traceparent)
			h.ServeHTTP(httptest.NewRecorder(), req)

			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			if col.mu.err != "" {
				t.Fatalf("collector: %s", col.mu.err)
			}
			if col.mu.reqs == 0 {
				t.Fatal("no export request reached the collector")
			}
			for _, p := range col.mu.paths {
				if p != "POST /v1/traces" {
					t.Errorf("export request %q, want POST /v1/traces", p)
				}
			}
			if got := attr(col.mu.res, "service.name"); got != "vigil" {
				t.Errorf("service.name = %q", got)
			}
			if got := attr(col.mu.res, "service.version"); got != "1.2.3" {
				t.Errorf("service.version = %q", got)
			}
			byName := map[string]*tracepb.Span{}
			for _, s := range col.mu.spans {
				byName[s.Name] = s
			}
			server, decide := byName["POST /v1/decisions"], byName["decide"]
			if server == nil || decide == nil {
				t.Fatalf("spans %v, want POST /v1/decisions and decide", slices.Sorted(maps.Keys(byName)))
			}
			if got := hex.EncodeToString(server.TraceId); got != traceID {
				t.Errorf("server span trace ID %s, want the traceparent's %s", got, traceID)
			}
			if got := hex.EncodeToString(server.ParentSpanId); got != parentID {
				t.Errorf("server span parent %s, want %s", got, parentID)
			}
			if server.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("server span kind %v", server.Kind)
			}
			if got := attr(server.Attributes, "http.route"); got != "/v1/decisions" {
				t.Errorf("http.route = %q", got)
			}
			if got := attr(server.Attributes, "http.response.status_code"); got != "201" {
				t.Errorf("http.response.status_code = %q", got)
			}
			if hex.EncodeToString(decide.TraceId) != traceID || !bytes.Equal(decide.ParentSpanId, server.SpanId) {
				t.Errorf("decide span is not a child of the server span")
			}
			if got := attr(decide.Attributes, string(AttrStream)); got != "transactions" {
				t.Errorf("%s = %q", AttrStream, got)
			}
			if got := attr(decide.Attributes, string(AttrDecisionID)); got != "tx-1" {
				t.Errorf("%s = %q", AttrDecisionID, got)
			}
		})
	}
}

// TestTracesOffWithoutEndpoint checks that with no endpoint (or with
// OTEL_TRACES_EXPORTER=none) spans are no-ops and nothing is sent, even to a
// collector listening on the default-looking address.
func TestTracesOffWithoutEndpoint(t *testing.T) {
	for _, c := range []struct {
		name                 string
		endpoint, tracesNone bool
	}{
		{"unset", false, false},
		{"exporter none", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := newCollector(t)
			t.Setenv(EnvOTLPEndpoint, "")
			t.Setenv(EnvOTLPTracesEndpoint, "")
			t.Setenv(envTracesExporter, "")
			if c.endpoint {
				t.Setenv(EnvOTLPEndpoint, col.srv.URL)
			}
			if c.tracesNone {
				t.Setenv(envTracesExporter, "none")
			}
			tel, err := New(Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tel.TracesExported() {
				t.Error("TracesExported() = true")
			}
			_, span := tel.Tracer().Start(context.Background(), "x")
			if span.IsRecording() {
				t.Error("tracer span is recording")
			}
			span.End()
			_, span = tel.StartDecision(context.Background(), "transactions", "tx-1")
			if span.IsRecording() {
				t.Error("decision span is recording")
			}
			span.End()
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			if col.mu.reqs != 0 {
				t.Errorf("%d requests reached the collector", col.mu.reqs)
			}
		})
	}
}
