package asyncio

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// BenchmarkOperator measures lookups per second through an unordered
// operator with capacity 100 and a lookup latency of 1ms: the ceiling is
// capacity / latency = 100k lookups/s.
func BenchmarkOperator(b *testing.B) {
	inproc := LookupFunc(func(ctx context.Context, key string) (map[string]any, error) {
		return map[string]any{"k": key}, pause(ctx, time.Millisecond)
	})
	b.Run("inproc", func(b *testing.B) { benchLookups(b, inproc) })
	b.Run("http", func(b *testing.B) {
		srv := newLatencyServer(b, func(string) time.Duration { return time.Millisecond })
		tr := srv.Client().Transport.(*http.Transport)
		tr.MaxIdleConnsPerHost = 100
		benchLookups(b, srv.lookup())
	})
}

func benchLookups(b *testing.B, l Lookup) {
	op, err := New(l, Config{Timeout: 5 * time.Second, Capacity: 100})
	if err != nil {
		b.Fatal(err)
	}
	defer op.Close()
	done := make(chan int)
	go func() {
		n := 0
		for o := range op.Results() {
			if o.Err != nil {
				b.Error(o.Err)
			}
			n++
		}
		done <- n
	}()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	i := 0
	for b.Loop() {
		if err := op.Submit(ctx, keys[i%len(keys)], nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := op.Drain(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(i)/time.Since(start).Seconds(), "lookups/s")
	op.Close()
	<-done
}
