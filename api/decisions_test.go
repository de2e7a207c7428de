package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/service"
)

func TestDecisions(t *testing.T) {
	f := newFixture(t)
	post := func(body string) *httptest.ResponseRecorder {
		return f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: body})
	}
	p := mustProblem(t, post(`{"tx_id":"t0"}`), http.StatusServiceUnavailable, probUnavailable)
	if p.Detail != "no ruleset was published yet" {
		t.Errorf("detail %q", p.Detail)
	}
	f.publish(baseDoc)

	rec := post(`{"tx_id":"t1","user_id":"u1","amount":500,"ts":1}`)
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("Idempotent-Replay") != "" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", rec.Header())
	}
	var d struct {
		Decision struct{ ID, Stream, Action string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil || d.Decision.ID != "t1" || d.Decision.Stream != "transactions" || d.Decision.Action != "block" {
		t.Errorf("decision %s (%v)", rec.Body, err)
	}
	first := rec.Body.String()

	// The same event again: the stored decision, marked as a replay.
	rec = post(`{"amount":500, "tx_id":"t1","user_id":"u1","ts":1}`)
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("Idempotent-Replay") != "true" || rec.Body.String() != first {
		t.Errorf("replay: %v %s", rec.Header(), rec.Body)
	}
	// The same id with another body.
	mustProblem(t, post(`{"tx_id":"t1","user_id":"u1","amount":501,"ts":1}`), http.StatusConflict, probIDConflict)

	rec = post(`{"tx_id":"t2","_saturate":true}`)
	mustProblem(t, rec, http.StatusTooManyRequests, probSaturated)
	if rec.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
	}
	rec = post(`{"tx_id":"t2","_not_owner":true}`)
	mustProblem(t, rec, http.StatusServiceUnavailable, probNotOwner)
	if rec.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
	}
	p = mustProblem(t, post(`{"tx_id":"t2","_fail":true}`), http.StatusInternalServerError, probInternal)
	if strings.Contains(p.Detail, "broken") || !strings.Contains(f.logs.String(), "memBackend: broken") {
		t.Errorf("a backend failure leaked to the client or missed the log: %q", p.Detail)
	}

	for _, tc := range []struct {
		name, body, ctype string
		status            int
		typ               problemType
		detail            string
	}{
		{"malformed", `{"tx_id": "t3",}`, "", 400, probMalformedJSON, "line 1, column 16: invalid character '}' looking for beginning of object key string"},
		{"truncated", `{"tx_id": "t3"`, "", 400, probMalformedJSON, "line 1, column 15: unexpected end of JSON input"},
		{"two values", `{"tx_id": "t3"} {}`, "", 400, probMalformedJSON, "line 1, column 17: invalid character '{' after top-level value"},
		// Not Unicode text: refused, not turned into U+FFFD (which would make
		// "w\xff" and "w\xfe" one id).
		{"invalid UTF-8", "{\"tx_id\":\"w\xff\"}", "", 400, probMalformedJSON, "line 1, column 12: invalid UTF-8 in string"},
		{"invalid UTF-8 in a key", "{\"tx_id\":\"t3\",\n\"user_id\":\"u\xfe\"}", "", 400, probMalformedJSON, "line 2, column 13: invalid UTF-8 in string"},
		{"lone surrogate", `{"tx_id":"w\ud800"}`, "", 400, probMalformedJSON, `line 1, column 12: unpaired UTF-16 surrogate in \u escape`},
		{"lone low surrogate", `{"tx_id":"t3","user_id":"\udc00x"}`, "", 400, probMalformedJSON, `line 1, column 26: unpaired UTF-16 surrogate in \u escape`},
		{"array", `[{"tx_id": "t3"}]`, "", 400, probBadRequest, "the body must be the event as a JSON object"},
		{"string", `"t3"`, "", 400, probBadRequest, "the body must be the event as a JSON object"},
		{"null", `null`, "", 400, probBadRequest, "the body must be the event as a JSON object"},
		{"form", `tx_id=t3`, "application/x-www-form-urlencoded", 415, probMediaType, `Content-Type "application/x-www-form-urlencoded" is not accepted here; send application/json`},
		{"yaml", `tx_id: t3`, "application/yaml", 415, probMediaType, `Content-Type "application/yaml" is not accepted here; send application/json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", body: tc.body, ctype: tc.ctype}), tc.status, tc.typ)
			if p.Detail != tc.detail {
				t.Errorf("detail %q, want %q", p.Detail, tc.detail)
			}
		})
	}
	// application/*+json and charset parameters are JSON.
	mustStatus(t, f.do(req{method: "POST", path: "/v1/decisions", body: `{"tx_id":"t4"}`, ctype: "application/vnd.vigil+json; charset=utf-8"}), 200)
	// No Content-Type at all is taken as JSON.
	hr := httptest.NewRequest("POST", "/v1/decisions", strings.NewReader(`{"tx_id":"t5"}`))
	hr.Header.Set("Authorization", "Bearer "+tokDecider)
	rec = httptest.NewRecorder()
	f.srv.ServeHTTP(rec, hr)
	mustStatus(t, rec, http.StatusOK)

	// ?stream= must name a deciding stream.
	p = mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions?stream=logins", body: `{"tx_id":"t6"}`}), 400, probBadRequest)
	if p.Detail != `stream "logins" does not decide in version 1 (deciding streams: transactions)` {
		t.Errorf("detail %q", p.Detail)
	}
	mustStatus(t, f.do(req{method: "POST", path: "/v1/decisions?stream=transactions", body: `{"tx_id":"t6"}`}), 200)

	// GET by id.
	rec = f.do(req{path: "/v1/decisions/t1", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	if !bytes.Contains(rec.Body.Bytes(), []byte(`"id":"t1"`)) {
		t.Errorf("GET decision %s", rec.Body)
	}
	mustProblem(t, f.do(req{path: "/v1/decisions/nope", token: tokDecider}), http.StatusNotFound, probNotFound)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", token: tokReader, body: `{}`}), http.StatusForbidden, probForbidden)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", token: "-", body: `{}`}), http.StatusUnauthorized, probUnauthorized)
}

func TestDecisionStreamChoice(t *testing.T) {
	f := newFixture(t)
	f.publish(`streams:
  a: {key: k, time: t, id: id, decide: true}
  b: {key: k, time: t, id: id, decide: watermark}
  c: {key: k, time: t}
`)
	p := mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", body: `{"tx_id":"x"}`}), 400, probBadRequest)
	if p.Detail != "several streams decide; name one with ?stream= (a, b)" {
		t.Errorf("detail %q", p.Detail)
	}
	rec := f.do(req{method: "POST", path: "/v1/decisions?stream=b", body: `{"tx_id":"x"}`})
	mustStatus(t, rec, 200)
	if !strings.Contains(rec.Body.String(), `"stream":"b"`) {
		t.Errorf("decision %s", rec.Body)
	}
	// A new version is seen at once.
	f.publish("streams:\n  c: {key: k, time: t}\n")
	p = mustProblem(t, f.do(req{method: "POST", path: "/v1/decisions", body: `{"tx_id":"y"}`}), 409, probConflict)
	if p.Detail != "no stream decides in version 2" {
		t.Errorf("detail %q", p.Detail)
	}
}

func TestEntities(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/v1/entities/u%2F1?limit=5&before=99&stream=transactions", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	e := decodeBody[service.Entity](t, rec)
	if e.Key != "u/1" || e.Watermark != 42 || len(e.History["transactions"]) != 1 {
		t.Errorf("entity %s", rec.Body)
	}
	f.b.mu.Lock()
	q := f.b.mu.entityQuery
	f.b.mu.Unlock()
	if q != (service.EntityQuery{Limit: 5, Before: 99, Stream: "transactions"}) {
		t.Errorf("query %+v", q)
	}
	mustStatus(t, f.do(req{path: "/v1/entities/u1", token: tokAnalyst}), http.StatusOK)
	f.b.mu.Lock()
	q = f.b.mu.entityQuery
	f.b.mu.Unlock()
	if q != (service.EntityQuery{Limit: defaultEntityLimit}) {
		t.Errorf("default query %+v", q)
	}
	mustProblem(t, f.do(req{path: "/v1/entities/u2"}), http.StatusNotFound, probNotFound)
	for _, qs := range []string{"limit=0", "limit=1001", "limit=ten", "before=-5", "before=1e3"} {
		mustProblem(t, f.do(req{path: "/v1/entities/u1?" + qs}), http.StatusBadRequest, probBadRequest)
	}
	mustProblem(t, f.do(req{path: "/v1/entities/u1", token: tokDecider}), http.StatusForbidden, probForbidden)
}

// FuzzDecisionBody sends arbitrary bodies to POST /v1/decisions: the
// answer is always a decision (200) or a well-formed problem, never a
// panic.
func FuzzDecisionBody(f *testing.F) {
	for _, s := range []string{
		`{"tx_id":"t1","amount":5}`, `{"tx_id":"t1","amount":6}`, `{}`, `[]`, `null`, `"x"`, `{"a":`, ``, ` `,
		`{"tx_id":"t2","_saturate":true}`, `{"tx_id":"t2","_not_owner":1}`, `{"_panic":true}`, `{"_fail":true}`,
		"{\"tx_id\":\"\xff\"}", `{"a":1}{"b":2}`, strings.Repeat("[", 20000), `{"tx_id":1e999}`,
	} {
		f.Add([]byte(s))
	}
	fx := newFixture(f, func(o *Options) { o.MaxBodyBytes, o.Logger = 4096, slog.New(slog.DiscardHandler) })
	fx.publish(baseDoc)
	f.Fuzz(func(t *testing.T, body []byte) {
		hr := httptest.NewRequest("POST", "/v1/decisions", bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+tokDecider)
		hr.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		openAPIChecked(t, fx.h).ServeHTTP(rec, hr)
		if rec.Code == http.StatusOK {
			var d service.Decision
			if rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &d) != nil || !json.Valid(d.Record) {
				t.Fatalf("200 that is not a decision: %s", rec.Body)
			}
			if !json.Valid(body) {
				t.Fatalf("malformed body %q decided", body)
			}
			return
		}
		switch rec.Code {
		case 400, 409, 413, 429, 500, 503:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if _, err := parseProblem(rec); err != nil {
			t.Fatal(err)
		}
	})
}
