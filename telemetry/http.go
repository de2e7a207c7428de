package telemetry

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// UnmatchedRoute is the route label of a request that routeOf gives no
// route for (404s of unknown paths): one series for all of them, never the
// raw path.
const UnmatchedRoute = "unmatched"

// HTTPMiddleware returns middleware that, for every request, continues the
// W3C trace context of its traceparent header in a server span, and
// records vigil_http_requests_total{route,status} and
// vigil_http_request_duration_seconds{route}.
//
// routeOf names the route pattern of a request ("/v1/entities/{key}"),
// never its path, which may hold a user key. It is called after the handler
// returns, with the request the handler got, so that a router that fills
// the pattern while routing has done so: with chi, install the middleware
// with Router.Use and pass
//
//	func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }
//
// and with net/http's ServeMux, func(r *http.Request) string { return r.Pattern }.
// An empty route is recorded as UnmatchedRoute. routeOf must not be nil.
//
// A handler that panics is recorded as a 500 and the panic goes on up, to
// the server or a recovering middleware outside this one. The wrapped
// ResponseWriter supports http.ResponseController (Unwrap) and http.Flusher.
func (t *Telemetry) HTTPMiddleware(routeOf func(*http.Request) string) func(http.Handler) http.Handler {
	if routeOf == nil {
		panic("telemetry: HTTPMiddleware needs a routeOf function")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ctx := t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			method := normalizeMethod(r.Method)
			ctx, span := t.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(method)))
			sw := &statusWriter{ResponseWriter: w}
			r = r.WithContext(ctx)

			finish := func(status int) {
				route := routeOf(r)
				if route == "" {
					route = UnmatchedRoute
				}
				t.metrics.HTTPRequest(route, status, time.Since(start))
				if span.IsRecording() {
					span.SetName(method + " " + route)
					span.SetAttributes(semconv.HTTPRoute(route), semconv.HTTPResponseStatusCode(status))
					if status >= 500 {
						span.SetStatus(codes.Error, http.StatusText(status))
					}
				}
				span.End()
			}
			defer func() {
				if p := recover(); p != nil {
					finish(http.StatusInternalServerError)
					panic(p)
				}
			}()
			next.ServeHTTP(sw, r)
			finish(sw.status())
		})
	}
}

// normalizeMethod keeps the standard methods and folds the rest, which a
// client chooses freely, into "_OTHER" (as the HTTP semantic conventions
// say), so that span names stay few.
func normalizeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx other than 101 are informational: the final status comes later.
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for handlers that assert it.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	return w.code
}
