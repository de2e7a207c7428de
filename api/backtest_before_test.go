package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
