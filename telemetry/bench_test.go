package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func BenchmarkRecordsIn(b *testing.B) {
	m := newTestTelemetry(b).Metrics()
	b.ReportAllocs()
	for b.Loop() {
		m.RecordsIn("transactions", 1)
	}
}

// BenchmarkRecordsInParallel measures contention: every task goroutine
// counting into the same series.
func BenchmarkRecordsInParallel(b *testing.B) {
	m := newTestTelemetry(b).Metrics()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RecordsIn("transactions", 1)
		}
	})
}

func BenchmarkRuleHit(b *testing.B) {
	for _, rules := range []int{1, 100} {
		b.Run("rules="+strconv.Itoa(rules), func(b *testing.B) {
			m := newTestTelemetry(b).Metrics()
			names := make([]string, rules)
			for i := range names {
				names[i] = "rule_" + strconv.Itoa(i)
				m.RuleHit(names[i], "active")
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.RuleHit(names[i%rules], "active")
				i++
			}
		})
	}
}

func BenchmarkDecisionLatency(b *testing.B) {
	m := newTestTelemetry(b).Metrics()
	b.ReportAllocs()
	for b.Loop() {
		m.DecisionLatency("kafka", 350*time.Microsecond)
	}
}

func BenchmarkDLQ(b *testing.B) {
	m := newTestTelemetry(b).Metrics()
	b.ReportAllocs()
	for b.Loop() {
		m.DLQ("transactions", ClassifyDLQ("time ts is missing or null"))
	}
}

func BenchmarkStartDecisionNoop(b *testing.B) {
	tel := newTestTelemetry(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := tel.StartDecision(ctx, "transactions", "tx-1")
		span.End()
	}
}

func BenchmarkHTTPMiddleware(b *testing.B) {
	tel := newTestTelemetry(b)
	h := tel.HTTPMiddleware(func(*http.Request) string { return "/v1/decisions" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	req := httptest.NewRequest(http.MethodPost, "/v1/decisions", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}
