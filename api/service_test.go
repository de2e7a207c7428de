package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil"
	"github.com/vigil-cep/vigil/api"

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
func realServiceBroker(t *testing.T, opts ...func(*vigil.Config)) (*httptest.Server, string) {
	t.Helper()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := vigil.Config{Kafka: kconf.Config{Brokers: []string{b.Addr()}}, DataDir: t.TempDir(), Partitions: 2, Logger: log}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := vigil.Open(context.Background(), cfg, []byte(serviceRules))
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
	h, err := api.New(svc, api.Options{Logger: log, Keys: []api.Key{
		{Name: "ops", Token: "admin-token-0123456789", Role: api.RoleAdmin},
		{Name: "gw", Token: "decider-token-0123456789", Role: api.RoleDecider},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.OpenAPIChecked(t, h))
	t.Cleanup(srv.Close)
	for i := 0; svc.Ready(context.Background()) != nil; i++ {
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

// TestRealServiceBacktestBefore: with "before": true, a backtest also
// returns the current ruleset's decision of each sample's event, without
// the marker rule that obtained it; without it, no "before".
func TestRealServiceBacktestBefore(t *testing.T) {
	srv := realService(t)
	const admin, js = "admin-token-0123456789", "application/json"
	events := strings.Join([]string{
		`{"stream":"tx","value":{"tx_id":"b1","user_id":"u1","amount":5,"ts":1000}}`,
		`{"stream":"tx","value":{"tx_id":"b2","user_id":"u1","amount":7,"ts":2000}}`,
		`{"stream":"tx","value":{"tx_id":"b3","user_id":"u1","amount":5,"ts":3000}}`,
	}, "\n") + "\n"
	req, _ := json.Marshal(map[string]any{
		"rule":   map[string]any{"name": "fives", "stream": "tx", "action": "block", "score": 50, "when": "amount == 5"},
		"events": events, "before": true,
	})
	status, body, _ := call(t, srv, admin, "POST", "/v1/rules:backtest", js, string(req))
	if status != http.StatusOK {
		t.Fatalf("backtest: %d %s", status, body)
	}
	type rec struct {
		ID, Action string
		Rules      []struct{ Rule string }
		Shadow     []struct{ Rule string }
	}
	var rep struct {
		Changed         int64
		ChangedByAction map[string]int64 `json:"changed_by_action"`
		Samples         []rec
		Before          map[string]rec
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	summary := func(r rec) string {
		s := r.ID + " " + r.Action
		for _, h := range r.Rules {
			s += " " + h.Rule
		}
		for _, h := range r.Shadow {
			s += " shadow:" + h.Rule
		}
		return s
	}
	var after, before []string
	for _, s := range rep.Samples {
		after = append(after, summary(s))
		before = append(before, summary(rep.Before[s.ID]))
	}
	if diff := cmp.Diff([]string{"b1 block fives", "b3 block fives velocity"}, after); diff != "" {
		t.Errorf("samples (-want +got):\n%s\n%s", diff, body)
	}
	if diff := cmp.Diff([]string{"b1 allow", "b3 review velocity"}, before); diff != "" {
		t.Errorf("before (-want +got):\n%s\n%s", diff, body)
	}
	if len(rep.Before) != 2 || rep.Changed != 2 || rep.ChangedByAction["allow->block"] != 1 || rep.ChangedByAction["review->block"] != 1 {
		t.Errorf("report %s", body)
	}

	req, _ = json.Marshal(map[string]any{"rule": map[string]any{"name": "fives", "stream": "tx", "action": "block", "when": "amount == 5"}, "events": events})
	if status, body, _ = call(t, srv, admin, "POST", "/v1/rules:backtest", js, string(req)); status != 200 || strings.Contains(body, `"before"`) {
		t.Errorf("without before: %d %s", status, body)
	}
}

// TestRealServiceRecentDecisions: from the real service, GET
// /v1/decisions reads the decisions topic: the decisions just made, newest
// first, filtered by action and rule.
func TestRealServiceRecentDecisions(t *testing.T) {
	srv := realService(t)
	const admin, gw, js = "admin-token-0123456789", "decider-token-0123456789", "application/json"
	var ids []string // newest first
	for i := range 4 {
		// One user, so one partition: records of the same millisecond are
		// ordered by offset. The third and fourth match velocity (review).
		id := fmt.Sprintf("r%d", i)
		body := fmt.Sprintf(`{"tx_id":%q,"user_id":"u1","amount":5,"ts":%d}`, id, 1000+i)
		if status, resp, _ := call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, body); status != 200 {
			t.Fatalf("decide %s: %d %s", id, status, resp)
		}
		ids = append([]string{id}, ids...)
	}
	for _, tc := range []struct {
		token, query string
		want         []string
		scanned      int // records read: all four with a filter, no deeper than the limit without
	}{
		{admin, "", ids, 4},
		{gw, "?action=review", ids[:2], 4},
		{gw, "?rule=velocity&limit=1", ids[:1], 4},
		{gw, "?action=allow", ids[2:], 4},
		{gw, "?action=block", []string{}, 4},
		{gw, "?limit=2", ids[:2], 2},
	} {
		status, body, _ := call(t, srv, tc.token, "GET", "/v1/decisions"+tc.query, "", "")
		if status != 200 {
			t.Fatalf("GET /v1/decisions%s: %d %s", tc.query, status, body)
		}
		if diff := cmp.Diff(tc.want, api.RecentIDs(t, []byte(body))); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.query, diff)
		}
		if !strings.Contains(body, fmt.Sprintf(`"scanned":%d`, tc.scanned)) {
			t.Errorf("%q: not %d records scanned: %s", tc.query, tc.scanned, body)
		}
	}
	// A decision made after those reads is in the next one (the reads share
	// one client, which starts each at the offsets it lists).
	if status, resp, _ := call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, `{"tx_id":"r4","user_id":"u1","amount":5,"ts":1004}`); status != 200 {
		t.Fatalf("decide r4: %d %s", status, resp)
	}
	status, body, _ := call(t, srv, gw, "GET", "/v1/decisions?limit=2", "", "")
	if diff := cmp.Diff([]string{"r4", "r3"}, api.RecentIDs(t, []byte(body))); status != 200 || diff != "" || !strings.Contains(body, `"scanned":2`) {
		t.Errorf("after one more decision: %d %s (-want +got):\n%s", status, body, diff)
	}
}

// TestRealServiceRecentDecisionsExactlyOnce: under exactly-once, GET
// /v1/decisions shows committed decisions only: not a decision record of
// a transaction that aborted, as a crash leaves behind.
func TestRealServiceRecentDecisionsExactlyOnce(t *testing.T) {
	srv, addr := realServiceBroker(t, func(c *vigil.Config) {
		c.Delivery, c.Checkpoints = kafka.ExactlyOnce, kafka.CheckpointsKafka
	})
	const gw, js = "decider-token-0123456789", "application/json"
	if status, resp, _ := call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, `{"tx_id":"r0","user_id":"u1","amount":5,"ts":1000}`); status != 200 {
		t.Fatalf("decide: %d %s", status, resp)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("a-crashed-task"), kgo.DefaultProduceTopic("vigil.decisions"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	aborted := `{"kind":"decision","id":"aborted","stream":"tx","key":"u1","time":2000,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]}`
	for p := range int32(2) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Key: []byte("aborted"), Value: []byte(aborted)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	status, body, _ := call(t, srv, gw, "GET", "/v1/decisions", "", "")
	if diff := cmp.Diff([]string{"r0"}, api.RecentIDs(t, []byte(body))); status != 200 || diff != "" || !strings.Contains(body, `"scanned":1`) {
		t.Errorf("%d %s (-want +got):\n%s", status, body, diff)
	}
}

// TestRealServiceEntityWatermark: on the service, a key whose task has seen
// no event shows a null watermark, and a number once events have arrived.
func TestRealServiceEntityWatermark(t *testing.T) {
	srv := realService(t)
	const admin, gw, js = "admin-token-0123456789", "decider-token-0123456789", "application/json"
	status, body, _ := call(t, srv, admin, "GET", "/v1/entities/u1", "", "")
	if status != 200 || !strings.Contains(body, `"watermark":null`) || !strings.Contains(body, `"lag_ms":null`) {
		t.Fatalf("entity before any event: %d %s", status, body)
	}
	if status, body, _ := call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, `{"tx_id":"t1","user_id":"u1","amount":5,"ts":1767225600000}`); status != 200 {
		t.Fatalf("decide: %d %s", status, body)
	}
	// The event reaches the task through its input topic: poll until the
	// task has read it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, body, _ = call(t, srv, admin, "GET", "/v1/entities/u1", "", "")
		if strings.Contains(body, `"watermark":1767225599999`) && !strings.Contains(body, `"lag_ms":null`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watermark 30s after an event: %s", body)
		}
		time.Sleep(50 * time.Millisecond) // polling the task's consumption
	}
}

// TestRealServiceEntityPaths: the service's entity and decision lookups get
// keys and ids exactly as sent, '%', '/', spaces and non-ASCII included.
func TestRealServiceEntityPaths(t *testing.T) {
	srv := realService(t)
	const admin, gw, js = "admin-token-0123456789", "decider-token-0123456789", "application/json"
	for i, key := range []string{"pct%41", "u/1", "u%2F1", "with space", "üser 名前"} {
		id := fmt.Sprintf("%s-t%d", key, i)
		ev, _ := json.Marshal(map[string]any{"tx_id": id, "user_id": key, "amount": 5, "ts": 1767225600000 + i})
		if status, body, _ := call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, string(ev)); status != 200 {
			t.Fatalf("decide %q: %d %s", id, status, body)
		}
		status, body, _ := call(t, srv, admin, "GET", "/v1/entities/"+url.PathEscape(key), "", "")
		var e struct {
			Key     string
			History map[string][]json.RawMessage
		}
		json.Unmarshal([]byte(body), &e)
		if status != 200 || e.Key != key || len(e.History["tx"]) != 1 {
			t.Errorf("GET /v1/entities/%s: %d %s; want key %q with its one event", url.PathEscape(key), status, body, key)
		}
		status, body, _ = call(t, srv, gw, "GET", "/v1/decisions/"+url.PathEscape(id), "", "")
		if status != 200 || !strings.Contains(body, fmt.Sprintf(`"id":%q`, id)) {
			t.Errorf("GET /v1/decisions/%s: %d %s", url.PathEscape(id), status, body)
		}
	}
}

// TestRealServiceRulesetTooLarge: on the service over the embedded broker,
// a valid 1 MB document is stored (compressed, under the default limit of
// 1 MiB); one that does not fit the rules topic even compressed is 413
// naming the topic's max.message.bytes, through PUT /v1/ruleset and item
// writes, and the live version stays.
func TestRealServiceRulesetTooLarge(t *testing.T) {
	srv, broker := realServiceBroker(t)
	const admin, js, yml = "admin-token-0123456789", "application/json", "application/yaml"
	var notes bytes.Buffer
	for i := 0; notes.Len() < 1_000_000-len(serviceRules); i++ {
		fmt.Fprintf(&notes, "# note %06d: the fraud team reviews this rule every quarter, with its hit rate\n", i)
	}
	status, body, _ := call(t, srv, admin, "PUT", "/v1/ruleset", yml, serviceRules+notes.String(), "If-Match", `"1"`)
	if status != 200 || !strings.Contains(body, `"version":2`) {
		t.Fatalf("a valid 1 MB document: %d %.300s", status, body)
	}

	setLimit := func(n int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		v := fmt.Sprint(n)
		resp, err := kadm.NewClient(cl).AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, "vigil.rules")
		if err == nil {
			_, err = resp.On("vigil.rules", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tooLarge := func(what string, status int, body string, limit int64) {
		t.Helper()
		var p struct {
			Type     string
			Detail   string
			MaxBytes *int64 `json:"max_bytes"`
		}
		json.Unmarshal([]byte(body), &p)
		if status != 413 || p.Type != "urn:vigil:problem:ruleset-too-large" || p.MaxBytes == nil || *p.MaxBytes != limit ||
			!strings.Contains(p.Detail, fmt.Sprintf("the topic's limit of %d bytes (max.message.bytes)", limit)) {
			t.Errorf("%s: %d %s; want 413 naming %d", what, status, body, limit)
		}
	}
	setLimit(64 << 10)
	status, body, _ = call(t, srv, admin, "PUT", "/v1/ruleset", yml, serviceRules+randomComment(200_000, 1), "If-Match", `"2"`)
	tooLarge("PUT /v1/ruleset", status, body, 64<<10)

	// Item writes publish too: rules with long random conditions, until one
	// does not fit.
	status, body, _ = call(t, srv, admin, "PUT", "/v1/ruleset", yml, serviceRules, "If-Match", `"2"`)
	if status != 200 {
		t.Fatalf("back to a small document: %d %s", status, body)
	}
	setLimit(4096)
	version := 3
	for i := 0; ; i++ {
		item, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("r%d", i), "stream": "tx", "action": "review",
			"when": fmt.Sprintf("merchant == %q", strings.ReplaceAll(randomComment(1500, uint64(i)), "\n", ""))})
		status, body, _ = call(t, srv, admin, "POST", "/v1/rules", js, string(item), "If-Match", fmt.Sprintf(`"%d"`, version))
		if status == 201 && i < 10 {
			version++
			continue
		}
		tooLarge("POST /v1/rules", status, body, 4096)
		break
	}
	if _, _, hdr := call(t, srv, admin, "GET", "/v1/ruleset", "", ""); hdr.Get("ETag") != fmt.Sprintf(`"%d"`, version) {
		t.Errorf("ETag %s after the refusal, want version %d", hdr.Get("ETag"), version)
	}
}

// randomComment returns YAML comment lines of random base64, about n bytes,
// which compress hardly at all.
func randomComment(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	raw := make([]byte, 57)
	for b.Len() < n {
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		b.WriteString("# " + base64.StdEncoding.EncodeToString(raw) + "\n")
	}
	return b.String()
}

// TestRealServiceValidateOneItem: the service's live ruleset is the context
// of a single item's validation.
func TestRealServiceValidateOneItem(t *testing.T) {
	srv := realService(t)
	const admin, js = "admin-token-0123456789", "application/json"
	status, body, _ := call(t, srv, admin, "POST", "/v1/rules:validate", js,
		`{"rule": {"name": "fives", "stream": "tx", "action": "block", "when": "amount == 5 && len(history(\"tx\", \"1h\")) > 1"}}`)
	if status != 200 || strings.TrimSpace(body) != `{"valid":true,"version":1}` {
		t.Errorf("valid rule: %d %s", status, body)
	}
	status, body, _ = call(t, srv, admin, "POST", "/v1/rules:validate", js,
		`{"rule": {"name": "fives", "stream": "transactions", "action": "block", "when": "amount == 5"}}`)
	var p struct {
		Errors []struct {
			Path string
			Line int
		}
	}
	json.Unmarshal([]byte(body), &p)
	if status != 422 || len(p.Errors) != 1 || p.Errors[0].Path != "rules.fives.stream" || p.Errors[0].Line == 0 {
		t.Errorf("a rule on a stream the live ruleset lacks: %d %s", status, body)
	}
}
