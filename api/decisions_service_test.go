package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRealServiceDecisionRepeats: against the real service, a repeated
// decision request, and a lookup of its id, get the first answer again,
// features included, byte for byte; the same id for a user whose partition another task owns is a 409
// (the instance's tasks share their ids), either way round; a body whose
// text is not Unicode is a 400.
func TestRealServiceDecisionRepeats(t *testing.T) {
	srv := realService(t)
	const admin, gw, js = "admin-token-0123456789", "decider-token-0123456789", "application/json"
	post := func(body string) (int, string, http.Header) {
		t.Helper()
		return call(t, srv, gw, "POST", "/v1/decisions?stream=tx", js, body)
	}
	tx := func(id, user string, ts int) string {
		return fmt.Sprintf(`{"tx_id":%q,"user_id":%q,"amount":5,"ts":%d}`, id, user, ts)
	}
	// Two users whose partitions two tasks own.
	taskOf := func(user string) int {
		t.Helper()
		if status, body, _ := post(tx("probe-"+user, user, 1)); status != 200 {
			t.Fatalf("probe %s: %d %s", user, status, body)
		}
		status, body, _ := call(t, srv, admin, "GET", "/v1/entities/"+user, "", "")
		var e struct{ Task int }
		if err := json.Unmarshal([]byte(body), &e); status != 200 || err != nil {
			t.Fatalf("entity %s: %d %s", user, status, body)
		}
		return e.Task
	}
	ua, ub := "ua", ""
	for i := 0; ub == ""; i++ {
		if u := fmt.Sprintf("ub%d", i); taskOf(u) != taskOf(ua) {
			ub = u
		}
	}

	// ua's third transaction matches velocity: its answer has features.
	post(tx("t1", ua, 10))
	status, first, hdr := post(tx("t2", ua, 20))
	if status != 200 || hdr.Get("Idempotent-Replay") != "" || !strings.Contains(first, `"features":{"velocity":{`) {
		t.Fatalf("first answer: %d %v %s", status, hdr, first)
	}
	status, again, hdr := post(tx("t2", ua, 20))
	if status != 200 || hdr.Get("Idempotent-Replay") != "true" || again != first {
		t.Errorf("repeat: %d %v\n%s\nwant the first answer\n%s", status, hdr, again, first)
	}
	// The lookup by id shows the same answer: the task keeps the features
	// with the id.
	if status, got, _ := call(t, srv, gw, "GET", "/v1/decisions/t2", "", ""); status != 200 || strings.TrimSpace(got) != strings.TrimSpace(first) {
		t.Errorf("GET /v1/decisions/t2: %d\n%s\nwant the first answer\n%s", status, got, first)
	}

	for _, c := range []struct {
		name, body string
		want       int
		contains   string
	}{
		{"id of ua's task for ub", tx("t2", ub, 20), 409, "id-conflict"},
		{"a new id for ub", tx("t3", ub, 30), 200, `"key":"` + ub + `"`},
		{"ub's id for ua", tx("t3", ua, 30), 409, "id-conflict"},
		{"invalid UTF-8 id", "{\"tx_id\":\"w\xff\",\"user_id\":\"ua\",\"ts\":1}", 400, `"detail":"line 1, column 12: invalid UTF-8 in string"`},
		{"unpaired surrogate key", `{"tx_id":"w1","user_id":"u\udc00","ts":1}`, 400, `unpaired UTF-16 surrogate`},
	} {
		status, body, _ := post(c.body)
		if status != c.want || !strings.Contains(body, c.contains) {
			t.Errorf("%s: %d %.300s, want %d with %q", c.name, status, body, c.want, c.contains)
		}
	}
}
