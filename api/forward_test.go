package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"
)

// elsewhere is a backend that owns no key: it names owner for every
// decision and entity.
type elsewhere struct {
	*memBackend
	owner string
}

func (b elsewhere) Decide(context.Context, string, []byte) (*service.Decision, bool, error) {
	return nil, false, &service.NotOwnerError{Owner: b.owner}
}

func (b elsewhere) Entity(context.Context, string, service.EntityQuery) (*service.Entity, error) {
	return nil, &service.NotOwnerError{Owner: b.owner}
}

func decidedBy(b *memBackend) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.decisions)
}

// forwardable are the routes whose requests go to the owner of their key
// (canForward's callers); the OpenAPI document lists the peer signature as
// their second security scheme (TestOpenAPISync).
var forwardable = map[string]bool{"POST /v1/decisions": true, "GET /v1/entities/{key}": true}

var testPeerSecret = []byte("0123456789abcdef0123456789abcdef")

// peerPair is an edge instance that owns nothing and the owner it forwards
// to, each with the test keys; the owner runs on a loopback server.
type peerPair struct {
	edge, owner *fixture
	ownerAddr   string
	forwards    atomic.Int32
}

func newPeerPair(t *testing.T, edgeSecret, ownerSecret []byte) *peerPair {
	t.Helper()
	p := &peerPair{}
	p.owner = newFixture(t, func(o *Options) { o.Peers = &Peers{Secret: ownerSecret} })
	srv := httptest.NewServer(p.owner.srv)
	t.Cleanup(srv.Close)
	p.ownerAddr = strings.TrimPrefix(srv.URL, "http://")
	p.edge = newFixture(t, func(o *Options) {
		o.Peers = &Peers{Secret: edgeSecret, OnForward: func(route, outcome string, d time.Duration) { p.forwards.Add(1) }}
	})
	p.edge.h.b = elsewhere{memBackend: p.edge.b, owner: p.ownerAddr}
	// Both instances read the same ruleset, as a group's do.
	p.owner.publish(baseDoc)
	p.edge.publish(baseDoc)
	return p
}

const decideBody = `{"tx_id":"t1","user_id":"u1","amount":500,"ts":1000}`

// A decision asked of an instance that does not own the key is made by the
// owner and answered as if local: the same status, body and
// Idempotent-Replay, with the caller's key checked once at the edge.
func TestForwardDecision(t *testing.T) {
	p := newPeerPair(t, testPeerSecret, testPeerSecret)
	rec := p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody})
	mustStatus(t, rec, http.StatusOK)
	if got := rec.Header().Get(hdrForwardedTo); got != p.ownerAddr {
		t.Errorf("%s = %q, want the owner %s", hdrForwardedTo, got, p.ownerAddr)
	}
	if o, e := decidedBy(p.owner.b), decidedBy(p.edge.b); o != 1 || e != 0 {
		t.Errorf("decided by the owner %d times, by the edge %d times; want 1 and 0", o, e)
	}
	again := p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody})
	mustStatus(t, again, http.StatusOK)
	if again.Header().Get("Idempotent-Replay") != "true" || again.Body.String() != rec.Body.String() {
		t.Errorf("the same id again: replay %q, body %s; want the stored decision", again.Header().Get("Idempotent-Replay"), again.Body)
	}
	conflict := p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider,
		body: strings.Replace(decideBody, "500", "501", 1)})
	mustProblem(t, conflict, http.StatusConflict, probIDConflict)

	ent := p.edge.do(req{path: "/v1/entities/u1", token: tokReader})
	mustStatus(t, ent, http.StatusOK)
	if ent.Header().Get(hdrForwardedTo) != p.ownerAddr {
		t.Errorf("entity read not forwarded: %v", ent.Header())
	}
	if n := p.forwards.Load(); n != 4 {
		t.Errorf("%d forwards counted, want 4", n)
	}
	// The owner saw the caller's key name, never its token.
	if logs := p.owner.logs.String(); !strings.Contains(logs, `"key":"gateway"`) || strings.Contains(logs, tokDecider) {
		t.Errorf("owner's access log: want the caller gateway and no token:\n%s", logs)
	}
}

// The edge checks the key before anything is forwarded.
func TestForwardChecksTheKeyAtTheEdge(t *testing.T) {
	p := newPeerPair(t, testPeerSecret, testPeerSecret)
	mustProblem(t, p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokReader, body: decideBody}),
		http.StatusForbidden, probForbidden)
	mustProblem(t, p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: "-", body: decideBody}),
		http.StatusUnauthorized, probUnauthorized)
	if n := p.forwards.Load(); n != 0 {
		t.Errorf("%d requests forwarded, want none", n)
	}
}

// A forwarded request signed with another secret, or forged, is refused by
// the owner; a request the owner cannot take is answered 503, never
// forwarded again.
func TestForwardRefusals(t *testing.T) {
	p := newPeerPair(t, []byte("another-secret-of-32-bytes-......"), testPeerSecret)
	rec := p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody})
	if prob := mustProblem(t, rec, http.StatusUnauthorized, probUnauthorized); !strings.Contains(prob.Detail, "peer signature does not match") {
		t.Errorf("detail %q", prob.Detail)
	}
	forged := p.owner.do(req{method: http.MethodPost, path: "/v1/decisions", token: "-", body: decideBody,
		header: map[string]string{hdrPeerCaller: "root:admin", hdrPeerTime: "1", hdrPeerSignature: "AAAA"}})
	mustProblem(t, forged, http.StatusUnauthorized, probUnauthorized)

	// Two instances that each think the other owns the key.
	q := newPeerPair(t, testPeerSecret, testPeerSecret)
	q.owner.h.b = elsewhere{memBackend: q.owner.b, owner: "127.0.0.1:1"}
	loop := q.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody})
	mustProblem(t, loop, http.StatusServiceUnavailable, probNotOwner)
	if loop.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}

	// An owner that does not answer.
	r := newPeerPair(t, testPeerSecret, testPeerSecret)
	r.edge.h.b = elsewhere{memBackend: r.edge.b, owner: "127.0.0.1:1"}
	down := r.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody})
	if prob := mustProblem(t, down, http.StatusServiceUnavailable, probNotOwner); !strings.Contains(prob.Detail, "did not answer") {
		t.Errorf("detail %q", prob.Detail)
	}
}

// Without a peer secret (and with keys) nothing is forwarded: 503 as before.
func TestNoForwardWithoutSecret(t *testing.T) {
	p := newPeerPair(t, nil, testPeerSecret)
	mustProblem(t, p.edge.do(req{method: http.MethodPost, path: "/v1/decisions", token: tokDecider, body: decideBody}),
		http.StatusServiceUnavailable, probNotOwner)
}
