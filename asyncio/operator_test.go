package asyncio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// latencyServer answers {"key": key} after a latency chosen per key by
// latency; it counts requests and the most concurrent ones.
type latencyServer struct {
	*httptest.Server
	requests, cur, maxCur atomic.Int64
}

func newLatencyServer(t testing.TB, latency func(key string) time.Duration) *latencyServer {
	s := &latencyServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		n := s.cur.Add(1)
		defer s.cur.Add(-1)
		for m := s.maxCur.Load(); n > m && !s.maxCur.CompareAndSwap(m, n); m = s.maxCur.Load() {
		}
		key := r.URL.Query().Get("k")
		if pause(r.Context(), latency(key)) != nil {
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"key": key})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *latencyServer) lookup() *HTTP {
	return NewHTTP(s.Client(), http.MethodGet, s.URL+"/profile?k={key}", 1<<10)
}

// randomLatency gives each key a latency of 0-maxMs ms derived from seed.
func randomLatency(t *testing.T, maxMs int) func(string) time.Duration {
	seed := uint64(time.Now().UnixNano())
	t.Logf("latency seed %d", seed)
	return func(key string) time.Duration {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s", seed, key)
		return time.Duration(h.Sum64()%uint64(maxMs+1)) * time.Millisecond
	}
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "k" + strconv.Itoa(i)
	}
	return ks
}

func outKeys(outs []Output) []string {
	var ks []string
	for _, o := range outs {
		if !o.Watermark {
			ks = append(ks, o.Key)
		}
	}
	return ks
}

func TestOrderedVsUnordered(t *testing.T) {
	srv := newLatencyServer(t, randomLatency(t, 20))
	in := keys(60)
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			op := newOp(t, srv.lookup(), Config{Timeout: 5 * time.Second, Capacity: 60, Ordered: ordered})
			errc := submitAll(op, in)
			outs := take(t, op, len(in), 5*time.Second)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			for _, o := range outs {
				if o.Err != nil || o.Value["key"] != o.Key || o.Element.(int) != slices.Index(in, o.Key) {
					t.Fatalf("output %+v", o)
				}
			}
			got := outKeys(outs)
			if ordered {
				if diff := cmp.Diff(in, got); diff != "" {
					t.Fatalf("ordered output not in input order (-want +got):\n%s", diff)
				}
				return
			}
			if slices.Equal(in, got) {
				t.Fatalf("unordered output is in input order; latencies should have reordered it")
			}
			slices.Sort(got)
			want := slices.Clone(in)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("unordered output is not a permutation of the input (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnorderedWatermarks interleaves watermarks with elements whose
// latencies alternate slow/fast per segment, so that fast elements after a
// watermark would overtake it and slow ones before it would fall behind it,
// if the operator allowed either.
func TestUnorderedWatermarks(t *testing.T) {
	const segments, per = 8, 15
	jitter := randomLatency(t, 5)
	srv := newLatencyServer(t, func(key string) time.Duration {
		seg, _ := strconv.Atoi(key[1:])
		if seg/per%2 == 0 {
			return 20*time.Millisecond + jitter(key)
		}
		return jitter(key)
	})
	for _, capacity := range []int{per, 3 * per} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) {
			op := newOp(t, srv.lookup(), Config{Timeout: 5 * time.Second, Capacity: capacity})
			errc := make(chan error, 1)
			go func() {
				ctx := context.Background()
				for i := range segments * per {
					if err := op.Submit(ctx, "k"+strconv.Itoa(i), i); err != nil {
						errc <- err
						return
					}
					if i%per == per-1 {
						if err := op.SubmitWatermark(ctx, int64(i/per)); err != nil {
							errc <- err
							return
						}
					}
				}
				errc <- nil
			}()
			outs := take(t, op, segments*per+segments, 5*time.Second)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			var wms []int64
			inSeg := 0
			for i, o := range outs {
				if o.Watermark {
					if inSeg != per {
						t.Fatalf("output %d: watermark %d after %d of its segment's %d elements", i, o.WM, inSeg, per)
					}
					wms, inSeg = append(wms, o.WM), 0
					continue
				}
				if seg := o.Element.(int) / per; seg != len(wms) {
					t.Fatalf("output %d: element of segment %d emitted after %d watermarks", i, seg, len(wms))
				}
				inSeg++
			}
			if diff := cmp.Diff([]int64{0, 1, 2, 3, 4, 5, 6, 7}, wms); diff != "" {
				t.Fatalf("watermarks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWatermarksMergeWhileBlocked(t *testing.T) {
	release := make(chan struct{})
	op := newOp(t, LookupFunc(func(ctx context.Context, key string) (map[string]any, error) {
		select {
		case <-release:
			return map[string]any{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}), Config{Timeout: 5 * time.Second, Capacity: 1, Ordered: true})
	ctx := context.Background()
	if err := op.Submit(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	for wm := range int64(1000) {
		if err := op.SubmitWatermark(ctx, wm); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	outs := take(t, op, 2, 5*time.Second)
	if outs[0].Key != "a" || !outs[1].Watermark || outs[1].WM != 999 {
		t.Fatalf("outputs %+v, want element a then watermark 999", outs)
	}
	if err := op.Drain(ctx); err != nil {
		t.Fatalf("drain after merged watermarks: %v", err)
	}
}

func TestTimeoutFallback(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	const timeout = 100 * time.Millisecond
	op := newOp(t, NewHTTP(hang.Client(), http.MethodGet, hang.URL+"/{key}", 1<<10), Config{
		Timeout: timeout, Retries: 2, Fallback: map[string]any{"risk": 0.5},
	})
	start := time.Now()
	if err := op.Submit(context.Background(), "u1", "ev"); err != nil {
		t.Fatal(err)
	}
	out := take(t, op, 1, 5*time.Second)[0]
	elapsed := time.Since(start)
	if diff := cmp.Diff(map[string]any{"risk": 0.5, "_error": "timeout"}, out.Value); diff != "" {
		t.Errorf("value (-want +got):\n%s", diff)
	}
	if !errors.Is(out.Err, ErrTimeout) || out.Element != "ev" {
		t.Errorf("output %+v, want element ev with ErrTimeout", out)
	}
	if elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("fallback after %v, want about %v", elapsed, timeout)
	}
	if s := op.Stats(); s.Timeouts != 1 || s.Fallbacks != 1 || s.Completed != 1 || s.InFlight != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestRetriesWithBackoff(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Path[1:]
		mu.Lock()
		seen[key] = append(seen[key], time.Now())
		n := len(seen[key])
		mu.Unlock()
		if key == "flaky" && n <= 2 || key == "down" {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		if key == "gone" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"ok": true}`)
	}))
	t.Cleanup(srv.Close)
	lookup := NewHTTP(srv.Client(), http.MethodGet, srv.URL+"/{key}", 1<<10)

	t.Run("recovers", func(t *testing.T) {
		op := newOp(t, lookup, Config{Timeout: 2 * time.Second, Retries: 3, Backoff: 20 * time.Millisecond})
		op.Submit(context.Background(), "flaky", nil)
		out := take(t, op, 1, 5*time.Second)[0]
		if out.Err != nil || out.Value["ok"] != true {
			t.Fatalf("output %+v, want success after retries", out)
		}
		mu.Lock()
		at := seen["flaky"]
		mu.Unlock()
		if len(at) != 3 {
			t.Fatalf("%d requests, want 3", len(at))
		}
		// Backoff 20ms then 40ms, each minus up to half as jitter.
		if g1, g2 := at[1].Sub(at[0]), at[2].Sub(at[1]); g1 < 10*time.Millisecond || g2 < 20*time.Millisecond {
			t.Errorf("gaps between attempts %v, %v; want >= 10ms, >= 20ms", g1, g2)
		}
		if s := op.Stats(); s.Retries != 2 || s.Fallbacks != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("within timeout", func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		op := newOp(t, lookup, Config{Timeout: timeout, Retries: 100, Backoff: 10 * time.Millisecond})
		start := time.Now()
		op.Submit(context.Background(), "down", nil)
		out := take(t, op, 1, 5*time.Second)[0]
		if elapsed := time.Since(start); elapsed > timeout+time.Second {
			t.Errorf("fallback after %v, want within about %v", elapsed, timeout)
		}
		mu.Lock()
		n := len(seen["down"])
		mu.Unlock()
		if out.Err == nil || n < 2 || n > 10 {
			t.Errorf("output %+v after %d requests; want a fallback after a few backed-off attempts", out, n)
		}
	})
	t.Run("permanent not retried", func(t *testing.T) {
		op := newOp(t, lookup, Config{Timeout: time.Second, Retries: 3})
		op.Submit(context.Background(), "gone", nil)
		out := take(t, op, 1, 5*time.Second)[0]
		var perm *PermanentError
		if !errors.As(out.Err, &perm) || op.Stats().Retries != 0 {
			t.Errorf("output %+v, stats %+v; want a permanent error without retries", out, op.Stats())
		}
		if got := out.Value["_error"]; got != `http lookup "gone": status 404 Not Found` {
			t.Errorf("_error = %q", got)
		}
	})
}

func TestCapacity(t *testing.T) {
	srv := newLatencyServer(t, func(string) time.Duration { return 3 * time.Millisecond })
	const capacity = 8
	op := newOp(t, srv.lookup(), Config{Timeout: 5 * time.Second, Capacity: capacity})
	errc := submitAll(op, keys(200))
	var maxInFlight int64
	for range 200 {
		maxInFlight = max(maxInFlight, op.Stats().InFlight)
		take(t, op, 1, 5*time.Second)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if m := srv.maxCur.Load(); m > capacity || m < 2 {
		t.Errorf("max concurrent requests %d, want 2..%d", m, capacity)
	}
	if maxInFlight > capacity {
		t.Errorf("max in flight %d > capacity %d", maxInFlight, capacity)
	}

	t.Run("full blocks submit", func(t *testing.T) {
		op := newOp(t, LookupFunc(func(ctx context.Context, key string) (map[string]any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}), Config{Timeout: 5 * time.Second, Capacity: 2})
		for i := range 2 {
			if err := op.Submit(context.Background(), "k", i); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := op.Submit(ctx, "k", 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("submit to a full operator = %v, want DeadlineExceeded", err)
		}
	})
}

func TestCache(t *testing.T) {
	srv := newLatencyServer(t, func(string) time.Duration { return 0 })
	now := time.Unix(1000, 0)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	op := newOp(t, srv.lookup(), Config{Timeout: time.Second, Cache: 2, CacheTTL: time.Minute, Clock: clock})
	get := func(key string) Output {
		t.Helper()
		if err := op.Submit(context.Background(), key, nil); err != nil {
			t.Fatal(err)
		}
		return take(t, op, 1, 5*time.Second)[0]
	}
	for _, k := range []string{"a", "b", "a", "a", "b"} {
		if out := get(k); out.Value["key"] != k {
			t.Fatalf("output %+v", out)
		}
	}
	if n, s := srv.requests.Load(), op.Stats(); n != 2 || s.CacheHits != 3 || s.CacheMisses != 2 {
		t.Errorf("%d requests, stats %+v; want 2 requests, 3 hits, 2 misses", n, s)
	}
	get("c") // evicts a, the least recently used
	get("a")
	if n := srv.requests.Load(); n != 4 {
		t.Errorf("%d requests after eviction, want 4", n)
	}
	clockMu.Lock()
	now = now.Add(time.Minute)
	clockMu.Unlock()
	get("a") // expired
	if n := srv.requests.Load(); n != 5 {
		t.Errorf("%d requests after TTL, want 5", n)
	}
}

func TestDrain(t *testing.T) {
	srv := newLatencyServer(t, randomLatency(t, 30))
	op := newOp(t, srv.lookup(), Config{Timeout: 5 * time.Second, Capacity: 16})
	var got atomic.Int64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for range op.Results() {
			got.Add(1)
		}
	}()
	ctx := context.Background()
	for i, k := range keys(40) {
		if err := op.Submit(ctx, k, i); err != nil {
			t.Fatal(err)
		}
	}
	op.SubmitWatermark(ctx, 7)
	if err := op.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if s := op.Stats(); s.InFlight != 0 || s.Completed != 40 || srv.cur.Load() != 0 {
		t.Fatalf("after Drain: %d requests running, stats %+v; want 0, nothing in flight", srv.cur.Load(), s)
	}
	// Every output was handed over before Drain returned; the reader counts
	// each one just after receiving it, so count once it has finished (Close
	// drops only outputs not yet handed over: none).
	op.Close()
	<-readerDone
	if n := got.Load(); n != 41 {
		t.Fatalf("%d outputs read after Drain, want 41 (40 results and the watermark)", n)
	}

	t.Run("unread results", func(t *testing.T) {
		op := newOp(t, srv.lookup(), Config{Timeout: time.Second})
		op.Submit(ctx, "x", nil)
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := op.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("drain without a reader = %v, want DeadlineExceeded", err)
		}
	})
}

func TestCloseNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	op, err := New(LookupFunc(func(ctx context.Context, key string) (map[string]any, error) {
		if key == "hang" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return map[string]any{}, nil
	}), Config{Timeout: time.Minute, Capacity: 50, Retries: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		op.Submit(ctx, "hang", i)
		op.Submit(ctx, "ok", i)
	}
	op.SubmitWatermark(ctx, 1)
	take(t, op, 5, 5*time.Second) // the emitter is blocked on the first "hang" or on Results
	if err := op.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-op.Results(); ok {
		t.Error("Results not closed after Close")
	}
	if err := op.Submit(ctx, "ok", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after close = %v, want ErrClosed", err)
	}
	noLeaks(t, before)
}

func TestConfigValidate(t *testing.T) {
	err := Config{Timeout: 0, Capacity: -1, Retries: -2}.Validate()
	want := "asyncio config: timeout must be > 0, got 0s\ncapacity must be >= 0, got -1\nretries must be >= 0, got -2"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v, want %q", err, want)
	}
	if _, err := New(LookupFunc(nil), Config{}); err == nil {
		t.Fatal("New accepted a zero Timeout")
	}
}

func TestRandomStreamsExactlyOnce(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	fail := LookupFunc(func(ctx context.Context, key string) (map[string]any, error) {
		h := fnv.New32a()
		h.Write([]byte(key))
		if h.Sum32()%4 == 0 {
			return nil, errors.New("boom")
		}
		return map[string]any{"k": key}, nil
	})
	for _, ordered := range []bool{true, false} {
		op := newOp(t, fail, Config{Timeout: time.Second, Capacity: 1 + rng.IntN(10), Ordered: ordered})
		n := 500
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			for i := range n {
				op.Submit(context.Background(), strconv.Itoa(i), i)
				if rng.IntN(5) == 0 {
					op.SubmitWatermark(context.Background(), int64(i))
				}
			}
		}()
		seen := make([]bool, n)
		last, maxSeen := -1, -1
		for count := 0; count < n; {
			o := take(t, op, 1, 5*time.Second)[0]
			if o.Watermark {
				// Watermark i follows element i: exactly elements 0..i are out.
				if count != int(o.WM)+1 || maxSeen != int(o.WM) {
					t.Fatalf("ordered=%v: watermark %d after %d elements, the largest %d", ordered, o.WM, count, maxSeen)
				}
				continue
			}
			i := o.Element.(int)
			if seen[i] || (ordered && i != last+1) {
				t.Fatalf("ordered=%v: element %d after %d (seen before: %v)", ordered, i, last, seen[i])
			}
			if (o.Err == nil) == (o.Value["_error"] != nil) {
				t.Fatalf("output %+v: Err and _error disagree", o)
			}
			seen[i], last, maxSeen = true, i, max(maxSeen, i)
			count++
		}
		<-fed
	}
}
