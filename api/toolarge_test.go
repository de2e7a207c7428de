package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
