package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// apiClient talks to a vigil serve's REST API.
type apiClient struct {
	t     *testing.T
	base  string
	token string
}

func (c *apiClient) do(method, path, body string, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// decide posts a transaction and returns the decision's action.
func (c *apiClient) decide(id string, amount int) string {
	c.t.Helper()
	resp, body := c.do("POST", "/v1/decisions?stream=tx", fmt.Sprintf(`{"tx_id":%q,"user_id":"u1","amount":%d,"ts":%d}`, id, amount, len(id)))
	if resp.StatusCode != 200 {
		c.t.Fatalf("POST /v1/decisions: %d %s", resp.StatusCode, body)
	}
	var d struct {
		Decision struct{ Action string } `json:"decision"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		c.t.Fatalf("decision %s: %v", body, err)
	}
	return d.Decision.Action
}

// TestServeRulesOverREST: a rule created over REST while transactions are
// decided is used by the next decision, with no restart; rolling it back
// restores the previous decisions. The keys come from VIGIL_API_KEYS.
func TestServeRulesOverREST(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  huge: {stream: tx, action: review, when: 'amount > 100000'}
`), 0o644)
	t.Setenv("VIGIL_API_KEYS", "ops:admin:0123456789abcdef0123,gw:decider:fedcba9876543210fedc")
	_, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--rules", rulesPath,
		"--data-dir", filepath.Join(dir, "state"))
	base := strings.TrimSuffix(lastField(line), ")")
	admin := &apiClient{t: t, base: base, token: "0123456789abcdef0123"}
	gw := &apiClient{t: t, base: base, token: "fedcba9876543210fedc"}

	for i := 0; ; i++ {
		if resp, _ := (&apiClient{t: t, base: base}).do("GET", "/readyz", ""); resp.StatusCode == 200 {
			break
		}
		if i == 300 {
			t.Fatal("/readyz not 200 after 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling the service's group join
	}
	if resp, _ := (&apiClient{t: t, base: base}).do("GET", "/v1/ruleset", ""); resp.StatusCode != 401 {
		t.Fatalf("no token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := gw.do("POST", "/v1/rules", `{"name":"x"}`); resp.StatusCode != 403 {
		t.Fatalf("decider creating a rule: %d, want 403", resp.StatusCode)
	}
	for _, id := range []string{"a1", "a2"} {
		if got := gw.decide(id, 5); got != "allow" {
			t.Fatalf("before the rule: %s", got)
		}
	}
	resp, body := admin.do("GET", "/v1/ruleset", "")
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || etag != `"1"` {
		t.Fatalf("GET /v1/ruleset: %d, ETag %s: %s", resp.StatusCode, etag, body)
	}
	resp, body = admin.do("POST", "/v1/rules", `{"name":"fives","stream":"tx","action":"block","score":10,"when":"amount == 5"}`, "If-Match", etag)
	if resp.StatusCode != 201 {
		t.Fatalf("POST /v1/rules: %d %s", resp.StatusCode, body)
	}
	if got := gw.decide("a3", 5); got != "block" {
		t.Fatalf("the decision after creating the rule: %s, want block", got)
	}
	// Explainability: what the matched rule compared.
	if resp, body := gw.do("POST", "/v1/decisions?stream=tx", `{"tx_id":"a3b","user_id":"u1","amount":5,"ts":9}`); resp.StatusCode != 200 ||
		!strings.Contains(body, `"features":{"fives":{"amount":5}}`) {
		t.Errorf("decision features: %d %s", resp.StatusCode, body)
	}
	resp, body = admin.do("POST", "/v1/rules/fives/rollback", `{"version":1}`, "If-Match", resp.Header.Get("ETag"))
	if resp.StatusCode != 204 { // absent in version 1: rolled back means deleted
		t.Fatalf("rollback: %d %s", resp.StatusCode, body)
	}
	if got := gw.decide("a4", 5); got != "allow" {
		t.Fatalf("the decision after the rollback: %s, want allow", got)
	}
	// An invalid rule is refused with its position; the running version stays.
	resp, body = admin.do("POST", "/v1/rules", `{"name":"bad","stream":"tx","action":"block","when":"amount >"}`, "If-Match", resp.Header.Get("ETag"))
	if resp.StatusCode != 422 || !strings.Contains(body, `"path":"rules.bad.when"`) {
		t.Fatalf("invalid rule: %d %s", resp.StatusCode, body)
	}
	resp, body = admin.do("GET", "/v1/audit", "")
	if resp.StatusCode != 200 || strings.Count(body, `"version":`) < 3 {
		t.Fatalf("audit: %d %s", resp.StatusCode, body)
	}
	if resp, body := (&apiClient{t: t, base: base}).do("GET", "/metrics", ""); resp.StatusCode != 200 ||
		!strings.Contains(body, `vigil_decision_latency_seconds_count{source="api"} 5`) {
		t.Errorf("/metrics: %d\n%s", resp.StatusCode, body)
	}
}

// TestServeTracesDecisions: with OTEL_EXPORTER_OTLP_ENDPOINT set, an API
// decision is exported as a "decide" span carrying the transaction id.
func TestServeTracesDecisions(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	var mu sync.Mutex
	var got []byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b...)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	c := &apiClient{t: t, base: strings.TrimSuffix(lastField(line), ")")}
	for i := 0; ; i++ {
		if resp, _ := c.do("GET", "/readyz", ""); resp.StatusCode == 200 {
			break
		}
		if i == 300 {
			t.Fatal("/readyz not 200 after 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling the service's group join
	}
	if resp, body := c.do("POST", "/v1/decisions?stream=transactions", `{"tx_id":"traced-tx-1","user_id":"u1","amount":5,"ts":1}`); resp.StatusCode != 200 {
		t.Fatalf("decision: %d %s", resp.StatusCode, body)
	}
	p.cmd.Process.Signal(os.Interrupt) // shutdown flushes the spans
	p.cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"decide", "vigil.decision.id", "traced-tx-1", "POST /v1/decisions"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("exported spans lack %q (%d bytes received)", want, len(got))
		}
	}
}
