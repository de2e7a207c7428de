package api

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEntityWithoutWatermark: a task with no watermark yet shows null, not
// -9223372036854775808, and no lag; a task with one shows both.
func TestEntityWithoutWatermark(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/v1/entities/fresh"})
	mustStatus(t, rec, http.StatusOK)
	if body := rec.Body.String(); !strings.Contains(body, `"watermark":null`) || !strings.Contains(body, `"lag_ms":null`) ||
		strings.Contains(body, "-9223372036854775808") {
		t.Errorf("entity without a watermark: %s", body)
	}
	rec = f.do(req{path: "/v1/entities/u1"})
	mustStatus(t, rec, http.StatusOK)
	// The backend's nil windows and decisions are [], not null.
	want := `{"key":"u1","history":{"transactions":[{"time":1000,"event":{"amount":5}}]},"windows":[],"partial_matches":{},"recent_decisions":[],"watermark":42,"lag_ms":7,"task":3,"instance":""}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Errorf("entity with a watermark:\n got %s\nwant %s", got, want)
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

// TestEntityJSONFields: Entity.MarshalJSON writes every field of Entity, so
// that a field added to the struct cannot go missing from the API.
func TestEntityJSONFields(t *testing.T) {
	type plain Entity // encoding/json's own encoding, without MarshalJSON
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		return slices.Sorted(maps.Keys(m))
	}
	e := Entity{Watermark: 1}
	if got, want := keys(e), keys(plain(e)); !slices.Equal(got, want) {
		t.Errorf("MarshalJSON writes %v, the struct has %v", got, want)
	}
}
