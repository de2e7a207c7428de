package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

type routeKey struct{}

// TestHTTPMiddleware checks the recorded route and status, as a router
// that fills the route while routing (chi) would see them.
func TestHTTPMiddleware(t *testing.T) {
	tel := newTestTelemetry(t)
	// routeOf reads a route holder that the "router" put in the context
	// before the middleware ran and that the handler fills, like chi's
	// RouteContext: so the route is only known after the handler returns.
	routeOf := func(r *http.Request) string {
		if p, ok := r.Context().Value(routeKey{}).(*string); ok {
			return *p
		}
		return ""
	}
	mw := tel.HTTPMiddleware(routeOf)
	serve := func(route string, h http.HandlerFunc) *httptest.ResponseRecorder {
		t.Helper()
		var holder string
		handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			holder = route
			h(w, r)
		}))
		req := httptest.NewRequest(http.MethodGet, "/v1/x/u-8431977", nil)
		req = req.WithContext(context.WithValue(req.Context(), routeKey{}, &holder))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}

	serve("/v1/rules/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	serve("/v1/rules/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	serve("/v1/rules", func(w http.ResponseWriter, r *http.Request) {}) // writes nothing: 200
	serve("/v1/rules", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints) // informational, not the final status
		w.WriteHeader(http.StatusNoContent)
	})
	serve("/v1/flush", func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the wrapped writer is not an http.Flusher")
			return
		}
		f.Flush()
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
	})
	serve("", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic to go on up", p)
			}
		}()
		serve("/v1/panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	}()

	body := scrape(t, tel)
	for _, line := range []string{
		`vigil_http_requests_total{route="/v1/rules/{id}",status="404"} 1`,
		`vigil_http_requests_total{route="/v1/rules/{id}",status="200"} 1`,
		`vigil_http_requests_total{route="/v1/rules",status="200"} 1`,
		`vigil_http_requests_total{route="/v1/rules",status="204"} 1`,
		`vigil_http_requests_total{route="/v1/flush",status="200"} 1`,
		`vigil_http_requests_total{route="unmatched",status="404"} 1`,
		`vigil_http_requests_total{route="/v1/panic",status="500"} 1`,
		`vigil_http_request_duration_seconds_count{route="/v1/rules/{id}"} 2`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no line %q in /metrics:\n%s", line, grepLines(body, "vigil_http_requests_total"))
		}
	}
	if strings.Contains(body, "u-8431977") {
		t.Error("the request path reached /metrics")
	}
}

// TestHTTPMiddlewarePropagates checks that the handler's context carries
// the caller's trace even when spans are not exported, so that outgoing
// calls and logs keep the trace ID.
func TestHTTPMiddlewarePropagates(t *testing.T) {
	tel := newTestTelemetry(t)
	var got trace.SpanContext
	h := tel.HTTPMiddleware(func(*http.Request) string { return "/v1/decisions" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = trace.SpanContextFromContext(r.Context())
		}))
	req := httptest.NewRequest(http.MethodPost, "/v1/decisions", nil)
	req.Header.Set("traceparent", traceparent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.TraceID().String() != traceID || got.SpanID().String() != parentID {
		t.Errorf("handler span context %v, want trace %s, span %s", got, traceID, parentID)
	}

	// No traceparent: no trace, and nothing invented.
	req = httptest.NewRequest(http.MethodPost, "/v1/decisions", nil)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.IsValid() {
		t.Errorf("handler span context %v without a traceparent", got)
	}
}

func TestHTTPMiddlewareNilRoute(t *testing.T) {
	tel := newTestTelemetry(t)
	defer func() {
		if recover() == nil {
			t.Error("HTTPMiddleware(nil) did not panic")
		}
	}()
	tel.HTTPMiddleware(nil)
}

func TestNormalizeMethod(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "get": "_OTHER", "PROPFIND": "_OTHER", "": "_OTHER"} {
		if got := normalizeMethod(in); got != want {
			t.Errorf("normalizeMethod(%q) = %q, want %q", in, got, want)
		}
	}
}
