package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

const (
	tokAdmin   = "admin-token-0123456789"
	tokAnalyst = "analyst-token-0123456789"
	tokDecider = "decider-token-0123456789"
	tokReader  = "reader-token-0123456789"
)

var testKeys = []Key{
	{Name: "root", Token: tokAdmin, Role: RoleAdmin},
	{Name: "alice", Token: tokAnalyst, Role: RoleAnalyst},
	{Name: "gateway", Token: tokDecider, Role: RoleDecider},
	{Name: "dashboard", Token: tokReader, Role: RoleReader},
}

func tokenFor(r Role) string {
	for _, k := range testKeys {
		if k.Role == r {
			return k.Token
		}
	}
	return ""
}

// baseDoc is a valid document with a YAML comment.
const baseDoc = `# the fraud team's rules
streams:
  transactions: {topic: transactions, key: user_id, time: ts, id: tx_id, decide: true}
  logins: {topic: logins, key: user_id, time: ts}
rules:
  big: {stream: transactions, action: review, score: 10, when: amount > 100}
`

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

type fixture struct {
	t    testing.TB
	b    *memBackend
	h    *Handler
	srv  http.Handler // h, every exchange checked against openapi.json
	logs *syncBuffer
}

func newFixture(t testing.TB, edit ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, b: newMemBackend(), logs: &syncBuffer{}}
	opts := Options{Keys: testKeys, Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, e := range edit {
		e(&opts)
	}
	h, err := New(f.b, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.h = h
	f.srv = openAPIChecked(t, h)
	return f
}

// req describes a request; the zero value is an admin GET with no body.
type req struct {
	method, path string
	token        string // "" = admin; "-" = none
	body         string
	ctype        string // default application/json when there is a body
	ifMatch      string
	header       map[string]string
}

func (f *fixture) do(r req) *httptest.ResponseRecorder {
	f.t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	switch r.token {
	case "":
		hr.Header.Set("Authorization", "Bearer "+tokAdmin)
	case "-":
	default:
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.body != "" {
		ct := r.ctype
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	if r.ifMatch != "" {
		hr.Header.Set("If-Match", r.ifMatch)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, hr)
	return rec
}

// publish puts doc in as the next version through the API.
func (f *fixture) publish(doc string) {
	f.t.Helper()
	cur := f.current()
	rec := f.do(req{method: "PUT", path: "/v1/ruleset", body: doc, ctype: "application/yaml", ifMatch: etag(cur)})
	if rec.Code != http.StatusOK {
		f.t.Fatalf("publish: %d %s", rec.Code, rec.Body)
	}
}

func (f *fixture) current() int64 {
	v, err := f.b.Ruleset(f.t.Context())
	if err != nil {
		return 0
	}
	return v.Number
}

// mustStatus fails unless rec has the status.
func mustStatus(t testing.TB, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body: %s", rec.Code, status, rec.Body)
	}
}

// mustProblem checks that rec is a well-formed problem with status and
// type, and returns it.
func mustProblem(t testing.TB, rec *httptest.ResponseRecorder, status int, typ problemType) problem {
	t.Helper()
	mustStatus(t, rec, status)
	p, err := parseProblem(rec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != typ.uri || p.Title != typ.title {
		t.Fatalf("problem type %q (%q), want %q; body: %s", p.Type, p.Title, typ.uri, rec.Body)
	}
	return p
}

// parseProblem checks the RFC 9457 shape of an error response.
func parseProblem(rec *httptest.ResponseRecorder) (problem, error) {
	var p problem
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		return p, fmt.Errorf("Content-Type %q, want application/problem+json; body: %s", ct, rec.Body)
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("problem body %q: %v", rec.Body, err)
	}
	switch {
	case p.Status != rec.Code:
		return p, fmt.Errorf("problem status %d, response %d", p.Status, rec.Code)
	case !strings.HasPrefix(p.Type, "urn:vigil:problem:") || p.Title == "":
		return p, fmt.Errorf("problem without type or title: %s", rec.Body)
	case p.Instance == "" || p.RequestID == "":
		return p, fmt.Errorf("problem without instance or request_id: %s", rec.Body)
	case p.RequestID != rec.Header().Get("X-Request-ID"):
		return p, fmt.Errorf("problem request_id %q, header %q", p.RequestID, rec.Header().Get("X-Request-ID"))
	}
	return p, nil
}

func decodeBody[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	return v
}
