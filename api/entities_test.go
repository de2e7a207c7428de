package api

import (
	"net/http"
	"strings"
	"testing"
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
