package api

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/go-chi/chi/v5"
)

func TestHealth(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/healthz", token: "-"})
	mustStatus(t, rec, http.StatusOK)
	if got := rec.Body.String(); got != "{\"status\":\"ok\"}\n" {
		t.Errorf("healthz body %q", got)
	}
	mustStatus(t, f.do(req{path: "/readyz", token: "-"}), http.StatusOK)

	f.b.mu.Lock()
	f.b.mu.ready = errors.New("rebalancing")
	f.b.mu.Unlock()
	p := mustProblem(t, f.do(req{path: "/readyz", token: "-"}), http.StatusServiceUnavailable, probUnavailable)
	if p.Detail != "not ready: rebalancing" {
		t.Errorf("detail %q", p.Detail)
	}
	// Not ready is the probe's answer, not a failure: its access log is at
	// Debug, where a 5xx is at Error.
	if !strings.Contains(f.logs.String(), `"level":"DEBUG","msg":"http request","method":"GET","route":"/readyz","status":503`) {
		t.Errorf("no Debug access log line for not ready:\n%s", f.logs)
	}
	mustStatus(t, f.do(req{path: "/healthz", token: "-"}), http.StatusOK) // alive while not ready
}

func TestOpenAPIServed(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/openapi.json", token: "-"})
	mustStatus(t, rec, http.StatusOK)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q, %v", doc.OpenAPI, err)
	}
}

func TestRequestID(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/v1/nope", header: map[string]string{"X-Request-ID": "abc-123.x:y_z"}})
	p := mustProblem(t, rec, http.StatusNotFound, probNotFound)
	if p.RequestID != "abc-123.x:y_z" {
		t.Errorf("request id %q not echoed", p.RequestID)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 129), "new\nline"} {
		hr := httptest.NewRequest("GET", "/healthz", nil)
		hr.Header["X-Request-Id"] = []string{bad}
		rec := httptest.NewRecorder()
		f.srv.ServeHTTP(rec, hr)
		got := rec.Header().Get("X-Request-ID")
		if got == bad || !validRequestID(got) || len(got) < 16 {
			t.Errorf("X-Request-ID %q for %q: want a generated id", got, bad)
		}
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	p := mustProblem(t, f.do(req{path: "/v2/rules"}), http.StatusNotFound, probNotFound)
	if p.Instance != "/v2/rules" {
		t.Errorf("instance %q", p.Instance)
	}
	rec := f.do(req{method: "PATCH", path: "/v1/rules/big"})
	mustProblem(t, rec, http.StatusMethodNotAllowed, probMethod)
	if got := strings.Join(rec.Header().Values("Allow"), ","); got != "GET,PUT,DELETE" {
		t.Errorf("Allow %q", got)
	}
	rec = f.do(req{method: "GET", path: "/v1/rules:validate"})
	mustProblem(t, rec, http.StatusMethodNotAllowed, probMethod)
	if got := strings.Join(rec.Header().Values("Allow"), ","); got != "POST" {
		t.Errorf("Allow %q", got)
	}
}

func TestPanicRecovered(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	rec := f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: `{"tx_id":"t1","_panic":true}`})
	p := mustProblem(t, rec, http.StatusInternalServerError, probInternal)
	if !strings.Contains(p.Detail, p.RequestID) {
		t.Errorf("detail %q does not give the request id", p.Detail)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"msg":"panic in HTTP handler"`) || !strings.Contains(logs, "memBackend: asked to panic") || !strings.Contains(logs, `"stack":"goroutine`) {
		t.Errorf("panic not logged with its stack:\n%s", logs)
	}
	// The server goes on.
	mustStatus(t, f.do(req{path: "/healthz"}), http.StatusOK)
}

func TestPanicAbortHandlerKeepsMeaning(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Middleware = func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })
		}
	})
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("recovered %v, want http.ErrAbortHandler", v)
		}
	}()
	f.do(req{path: "/healthz"})
}

func TestAccessLog(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	mustStatus(t, f.do(req{path: "/v1/rules/big", token: tokAnalyst, header: map[string]string{"X-Request-ID": "rid-1"}}), http.StatusOK)
	var line map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(f.logs.String()), "\n") {
		if strings.Contains(l, `"request_id":"rid-1"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]any{"msg": "http request", "level": "INFO", "method": "GET", "route": "/v1/rules/{id}", "status": float64(200), "key": "alice", "request_id": "rid-1"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if _, ok := line["duration"]; !ok {
		t.Error("no duration")
	}
	// A decision, at the rate of transactions: Debug.
	mustStatus(t, f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: `{"tx_id":"t1","user_id":"u1","amount":5,"ts":1}`,
		header: map[string]string{"X-Request-ID": "rid-2"}}), http.StatusOK)
	if !strings.Contains(f.logs.String(), `"level":"DEBUG","msg":"http request","method":"POST","route":"/v1/decisions"`) {
		t.Errorf("no Debug access log line for a decision:\n%s", f.logs)
	}
	for _, tok := range []string{tokAdmin, tokAnalyst} {
		if strings.Contains(f.logs.String(), tok) {
			t.Error("a token reached the log")
		}
	}
}

func TestMiddlewareHookAndMetrics(t *testing.T) {
	var seen atomic.Value
	var calls atomic.Int64
	hook := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if RequestID(r.Context()) == "" {
				t.Error("no request id in the hook")
			}
			next.ServeHTTP(w, r)
			seen.Store(chi.RouteContext(r.Context()).RoutePattern())
		})
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("vigil_up 1\n")) })

	f := newFixture(t, func(o *Options) { o.Middleware, o.Metrics = hook, metrics })
	rec := f.do(req{path: "/metrics", token: "-"})
	mustStatus(t, rec, http.StatusOK)
	if rec.Body.String() != "vigil_up 1\n" {
		t.Errorf("metrics body %q", rec.Body)
	}
	f.do(req{path: "/v1/entities/u1"})
	if calls.Load() != 2 || seen.Load() != "/v1/entities/{key}" {
		t.Errorf("hook: %d calls, last pattern %v", calls.Load(), seen.Load())
	}

	f = newFixture(t, func(o *Options) { o.Metrics, o.MetricsAuth = metrics, true })
	mustProblem(t, f.do(req{path: "/metrics", token: "-"}), http.StatusUnauthorized, probUnauthorized)
	mustProblem(t, f.do(req{path: "/metrics", token: tokDecider}), http.StatusForbidden, probForbidden)
	mustStatus(t, f.do(req{path: "/metrics", token: tokReader}), http.StatusOK)

	f = newFixture(t)
	mustProblem(t, f.do(req{path: "/metrics"}), http.StatusNotFound, probNotFound)
}

func TestNewServer(t *testing.T) {
	s := NewServer("127.0.0.1:0", http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Errorf("unset limits: %+v", s)
	}
	if s.ReadHeaderTimeout > 10*time.Second {
		t.Errorf("ReadHeaderTimeout %v lets slow clients hold connections", s.ReadHeaderTimeout)
	}
}

// TestSlowClientCutOff checks that a client that never finishes its
// headers is disconnected by ReadHeaderTimeout.
func TestSlowClientCutOff(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewUnstartedServer(f.h)
	s := NewServer("", f.h)
	s.ReadHeaderTimeout = 50 * time.Millisecond
	srv.Config = s
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	// The server closes the connection (possibly after a 408).
	if err == nil && !strings.Contains(string(buf[:n]), "408") {
		t.Errorf("server answered %q to an unfinished request", buf[:n])
	}
	if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		t.Error("the server kept the slow connection open")
	}
}

func TestBodyLimits(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBodyBytes = 64 })
	if _, err := f.b.Publish(t.Context(), []byte(baseDoc), 0, service.Change{}); err != nil {
		t.Fatal(err)
	}
	big := `{"tx_id":"` + strings.Repeat("x", 100) + `"}`
	mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", body: big}), http.StatusRequestEntityTooLarge, probTooLarge)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:validate", body: baseDoc + strings.Repeat("#", 100), ctype: "application/yaml"}), http.StatusRequestEntityTooLarge, probTooLarge)
	mustProblem(t, f.do(req{method: "PUT", path: "/v1/rules/big", ifMatch: `"1"`, body: big}), http.StatusRequestEntityTooLarge, probTooLarge)

	// Without Content-Length (chunked), the reader stops at the limit.
	hr := httptest.NewRequest("POST", "/v1/decisions", strings.NewReader(big))
	hr.ContentLength = -1
	hr.Header.Set("Authorization", "Bearer "+tokAdmin)
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, hr)
	mustProblem(t, rec, http.StatusRequestEntityTooLarge, probTooLarge)

	mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", body: " \n "}), http.StatusBadRequest, probBadRequest)
}
