package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// The tests here serve the API from the real service on an in-process
// Kafka-protocol broker, as vigil serve does: the status codes below come
// from the service's own errors, not from a test backend.

const serviceRules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  velocity: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 3'}
`

func realService(t *testing.T) *httptest.Server {
	t.Helper()
	srv, _ := realServiceBroker(t)
	return srv
}

// realServiceBroker is realService that also returns the broker's address.
func realServiceBroker(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := kafka.New(context.Background(), kafka.Config{Kafka: kconf.Config{Brokers: []string{b.Addr()}}, DataDir: t.TempDir(),
		Partitions: 2, Logger: log}, []byte(serviceRules), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	h, err := New(ServiceBackend{S: svc, Kafka: kconf.Config{Brokers: []string{b.Addr()}}}, Options{Logger: log, Keys: []Key{
		{Name: "ops", Token: "admin-token-0123456789", Role: RoleAdmin},
		{Name: "gw", Token: "decider-token-0123456789", Role: RoleDecider},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(openAPIChecked(t, h))
	t.Cleanup(srv.Close)
	for i := 0; svc.Ready() != nil; i++ {
		if i == 300 {
			t.Fatal("service not ready after 30s")
		}
		time.Sleep(100 * time.Millisecond) // waiting for the group to assign
	}
	return srv, b.Addr()
}

func call(t *testing.T, srv *httptest.Server, token, method, path, ctype, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestRealServiceStatuses: every status of the contract, served by the
// real service.
func TestRealServiceStatuses(t *testing.T) {
	srv := realService(t)
	const admin, gw, js = "admin-token-0123456789", "decider-token-0123456789", "application/json"
	tx := func(id string, amount int) string {
		return fmt.Sprintf(`{"tx_id":%q,"user_id":"u1","amount":%d,"ts":%d}`, id, amount, len(id))
	}
	for _, c := range []struct {
		name                       string
		token, method, path, ctype string
		body                       string
		hdr                        []string
		want                       int
		contains                   string
	}{
		{"no token", "", "GET", "/v1/ruleset", "", "", nil, 401, "unauthorized"},
		{"unknown token", "nope-nope-nope-nope", "GET", "/v1/ruleset", "", "", nil, 401, ""},
		{"wrong role", gw, "PUT", "/v1/ruleset", js, "{}", []string{"If-Match", `"1"`}, 403, "forbidden"},
		{"read the ruleset", admin, "GET", "/v1/ruleset", "", "", nil, 200, "velocity"},
		{"decide", gw, "POST", "/v1/decisions?stream=tx", js, tx("t1", 5), nil, 200, `"id":"t1"`},
		{"decide again", gw, "POST", "/v1/decisions?stream=tx", js, tx("t1", 5), nil, 200, `"id":"t1"`},
		{"id conflict", gw, "POST", "/v1/decisions?stream=tx", js, tx("t1", 6), nil, 409, "id-conflict"},
		{"malformed JSON", gw, "POST", "/v1/decisions?stream=tx", js, `{"tx_id":`, nil, 400, "malformed"},
		{"no key", gw, "POST", "/v1/decisions?stream=tx", js, `{"tx_id":"k","ts":1}`, nil, 422, "bad-event"},
		{"unknown stream", gw, "POST", "/v1/decisions?stream=nope", js, tx("t2", 5), nil, 400, "does not decide"},
		{"wrong media type", gw, "POST", "/v1/decisions?stream=tx", "text/plain", tx("t3", 5), nil, 415, ""},
		{"oversized body", gw, "POST", "/v1/decisions?stream=tx", js, `{"pad":"` + strings.Repeat("x", 2<<20) + `"}`, nil, 413, ""},
		{"get a decision", gw, "GET", "/v1/decisions/t1", "", "", nil, 200, `"id":"t1"`},
		{"unknown decision", gw, "GET", "/v1/decisions/zz", "", "", nil, 404, ""},
		{"invalid rule", admin, "POST", "/v1/rules", js, `{"name":"bad","stream":"tx","action":"block","when":"amount >"}`, []string{"If-Match", `"1"`}, 422, `"path":"rules.bad.when"`},
		{"stale version", admin, "POST", "/v1/rules", js, `{"name":"x","stream":"tx","action":"block","when":"amount > 1"}`, []string{"If-Match", `"7"`}, 412, ""},
		{"no If-Match", admin, "POST", "/v1/rules", js, `{"name":"x","stream":"tx","action":"block","when":"amount > 1"}`, nil, 428, ""},
		{"create a rule", admin, "POST", "/v1/rules", js, `{"name":"x","stream":"tx","action":"block","when":"amount > 1"}`, []string{"If-Match", `"1"`}, 201, ""},
		{"used at once", gw, "POST", "/v1/decisions?stream=tx", js, tx("t4", 5), nil, 200, `"action":"block"`},
		{"entity", admin, "GET", "/v1/entities/u1", "", "", nil, 200, `"recent_decisions"`},
		{"audit", admin, "GET", "/v1/audit", "", "", nil, 200, `"version":2`},
	} {
		status, body, _ := call(t, srv, c.token, c.method, c.path, c.ctype, c.body, c.hdr...)
		if status != c.want || !strings.Contains(body, c.contains) {
			t.Errorf("%s: %d %.300s, want %d with %q", c.name, status, body, c.want, c.contains)
		}
		if status >= 400 && !strings.Contains(body, `"request_id"`) {
			t.Errorf("%s: not a problem document: %.200s", c.name, body)
		}
	}
}
