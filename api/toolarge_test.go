package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRulesetTooLargeProblem: a document the backend cannot store is 413
// ruleset-too-large naming the limit, for whole documents and item edits
// alike; a body over the API's own limit is 413 body-too-large with its
// limit.
func TestRulesetTooLargeProblem(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBodyBytes = 4096 })
	f.publish(baseDoc)
	limit := len(baseDoc) + 200
	f.b.mu.Lock()
	f.b.mu.storeLimit = limit
	f.b.mu.Unlock()
	check := func(what string, rec *httptest.ResponseRecorder, want problemType, max int64, detail string) {
		t.Helper()
		p := mustProblem(t, rec, http.StatusRequestEntityTooLarge, want)
		if p.MaxBytes == nil || *p.MaxBytes != max || detail != "" && p.Detail != detail {
			t.Errorf("%s: %s; want max_bytes %d, detail %q", what, rec.Body, max, detail)
		}
	}
	doc := baseDoc + "# " + strings.Repeat("x", 300) + "\n"
	check("PUT /v1/ruleset", f.do(req{method: "PUT", path: "/v1/ruleset", body: doc, ctype: "application/yaml", ifMatch: `"1"`}),
		probRulesetTooLarge, int64(limit), fmt.Sprintf("the document is %d bytes, more than the store takes (%d)", len(doc), limit))
	check("POST /v1/rules", f.do(req{method: "POST", path: "/v1/rules", ifMatch: `"1"`,
		body: `{"name": "long", "stream": "transactions", "action": "review", "when": "amount > 1", "reason": "\"` + strings.Repeat("y", 300) + `\""}`}),
		probRulesetTooLarge, int64(limit), "")
	if f.current() != 1 {
		t.Errorf("version %d after refusals, want 1", f.current())
	}
	check("a body over MaxBodyBytes", f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc + "# " + strings.Repeat("z", 5000), ctype: "application/yaml", ifMatch: `"1"`}),
		probTooLarge, 4096, "the body is larger than 4096 bytes")
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
		var p problem
		json.Unmarshal([]byte(body), &p)
		if status != 413 || p.Type != probRulesetTooLarge.uri || p.MaxBytes == nil || *p.MaxBytes != limit ||
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
