package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/service"

	"github.com/google/go-cmp/cmp"
)

// recentIDs decodes GET /v1/decisions and returns the ids, in order.
func recentIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var page struct {
		Decisions []struct{ ID string }
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	ids := []string{}
	for _, d := range page.Decisions {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestRecentDecisions: GET /v1/decisions lists the newest decisions first,
// filtered by action and by rule; bad filters are 400, a backend that
// cannot list is 503, and every role that reads decisions may ask.
func TestRecentDecisions(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	for i, amount := range []int{5, 500, 7, 900} {
		body := fmt.Sprintf(`{"tx_id":"t%d","user_id":"u1","amount":%d,"ts":%d}`, i, amount, i)
		mustStatus(t, f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: body}), http.StatusOK)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"t3", "t2", "t1", "t0"}},
		{"?limit=2", []string{"t3", "t2"}},
		{"?action=block", []string{"t3", "t1"}},
		{"?action=allow&limit=1", []string{"t2"}},
		{"?rule=big", []string{"t3", "t1"}},
		{"?rule=nope", []string{}},
		{"?action=review&rule=big", []string{}},
	} {
		for _, tok := range []string{tokReader, tokDecider, tokAnalyst} {
			rec := f.do(req{path: "/v1/decisions" + tc.query, token: tok})
			mustStatus(t, rec, http.StatusOK)
			if diff := cmp.Diff(tc.want, recentIDs(t, rec.Body.Bytes())); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.query, diff)
			}
		}
	}
	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x", "?action=deny"} {
		mustProblem(t, f.do(req{path: "/v1/decisions" + q}), http.StatusBadRequest, probBadRequest)
	}
	f.b.mu.Lock()
	f.b.mu.recentErr = fmt.Errorf("%w: no feed", service.ErrUnavailable)
	f.b.mu.Unlock()
	p := mustProblem(t, f.do(req{path: "/v1/decisions"}), http.StatusServiceUnavailable, probUnavailable)
	if p.Detail != "unavailable: no feed" {
		t.Errorf("detail %q", p.Detail)
	}
	f.b.mu.Lock()
	f.b.mu.recentErr = errors.New("disk on fire")
	f.b.mu.Unlock()
	mustProblem(t, f.do(req{path: "/v1/decisions"}), http.StatusInternalServerError, probInternal)
}

// TestDecisionFeatures: GET /v1/decisions/{id} shows the decision with the
// features the POST answered with; a decision no rule matched has none.
func TestDecisionFeatures(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	post := f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: `{"tx_id":"t1","user_id":"u1","amount":500,"ts":1}`})
	mustStatus(t, post, http.StatusOK)
	got := f.do(req{path: "/v1/decisions/t1", token: tokReader})
	mustStatus(t, got, http.StatusOK)
	if got.Body.String() != post.Body.String() || !strings.Contains(got.Body.String(), `"features":{"big":{"amount":500}}`) {
		t.Errorf("GET %s\nwant the POST's answer %s", got.Body, post.Body)
	}
	mustStatus(t, f.do(req{method: "POST", path: "/v1/decisions", token: tokDecider, body: `{"tx_id":"t2","user_id":"u1","amount":5,"ts":2}`}), http.StatusOK)
	if got := f.do(req{path: "/v1/decisions/t2", token: tokReader}); strings.Contains(got.Body.String(), "features") {
		t.Errorf("GET t2 %s: features for a decision no rule matched", got.Body)
	}
}
