package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// schemaDoc declares the fields of its streams, so that a rule reading
// another field does not load.
const schemaDoc = `streams:
  transactions: {topic: transactions, key: user_id, time: ts, id: tx_id, decide: true,
                 fields: {tx_id: string, user_id: string, amount: number, ts: number}}
  logins: {topic: logins, key: user_id, time: ts}
rules:
  big: {stream: transactions, action: review, score: 10, when: amount > 100}
`

// TestValidateOneItem: POST /v1/rules:validate takes one item, as backtest
// takes its candidate, and checks it against the live document: its
// streams, their fields and the other items.
func TestValidateOneItem(t *testing.T) {
	f := newFixture(t)
	f.publish(schemaDoc)
	f.publish(schemaDoc + "  small: {stream: transactions, action: allow, when: amount < 1}\n")
	validate := func(body, ctype string) *httptest.ResponseRecorder {
		return f.do(req{method: "POST", path: "/v1/rules:validate", body: body, ctype: ctype, token: tokAnalyst})
	}
	for _, c := range []struct {
		name, body, ctype string
	}{
		{"a new rule", `{"rule": {"name": "tiny", "stream": "transactions", "action": "block", "when": "amount < 1"}}`, ""},
		{"a rule replacing the live one", `{"rule": {"name": "big", "stream": "transactions", "action": "block", "when": "amount > 1000"}}`, ""},
		{"a rule reading another stream's history", `{"rule": {"name": "h", "stream": "transactions", "action": "review", "when": "len(history(\"logins\", \"5m\")) > 3"}}`, ""},
		{"a stream", `{"stream": {"name": "payments", "topic": "payments", "key": "user_id", "time": "ts"}}`, ""},
		{"YAML", "rule:\n  name: tiny\n  stream: transactions\n  action: block\n  when: amount < 1\n", "application/yaml"},
	} {
		rec := validate(c.body, c.ctype)
		if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"valid":true,"version":2}` {
			t.Errorf("%s: %d %s", c.name, rec.Code, rec.Body)
		}
	}
	for _, c := range []struct {
		name, body   string
		path, substr string
	}{
		{"an unknown stream", `{"rule": {"name": "tiny", "stream": "transactoins", "action": "block", "when": "amount < 1"}}`,
			"rules.tiny.stream", `unknown stream "transactoins"`},
		{"a field the stream does not declare", `{"rule": {"name": "tiny", "stream": "transactions", "action": "block", "when": "merchant == \"x\""}}`,
			"rules.tiny.when", "merchant"},
		{"a syntax error", `{"rule": {"name": "big", "stream": "transactions", "action": "block", "when": "amount >"}}`,
			"rules.big.when", "unexpected token EOF"},
		{"a window over an unknown stream", `{"window": {"name": "w", "stream": "nope", "tumbling": "1m", "aggregate": {"n": "count()"}}}`,
			"windows.w.stream", "nope"},
	} {
		rec := validate(c.body, "")
		p := mustProblem(t, rec, http.StatusUnprocessableEntity, probInvalidRuleset)
		found := false
		for _, e := range p.Errors {
			if e.Path == c.path && strings.Contains(e.Message, c.substr) && e.Line > 0 && e.Column > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no positioned error at %s with %q: %s", c.name, c.path, c.substr, rec.Body)
		}
	}
	for _, c := range []struct{ name, body, detail string }{
		{"more than the item", `{"rule": {"name": "x"}, "events": ""}`, `send one candidate item, {"rule": {"name": …, …}}, and nothing else; or a whole document`},
		{"not an object", `{"rule": 5}`, "rule must be an object (the item's fields and its name)"},
		{"no name", `{"rule": {"stream": "transactions"}}`, `the rule needs a name: "name" in the body`},
	} {
		p := mustProblem(t, validate(c.body, ""), http.StatusBadRequest, probBadRequest)
		if p.Detail != c.detail {
			t.Errorf("%s: detail %q, want %q", c.name, p.Detail, c.detail)
		}
	}
	// A whole document is validated as before, on its own.
	rec := validate(baseDoc, "application/yaml")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"valid":true}` {
		t.Errorf("a whole document: %d %s", rec.Code, rec.Body)
	}
	if f.current() != 2 {
		t.Errorf("validation published: version %d", f.current())
	}
}
