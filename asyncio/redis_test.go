package asyncio

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

func TestRedisLookups(t *testing.T) {
	srv := startRedis(t, 0)
	c := newRedisClient(t, srv.addr())
	ctx := context.Background()
	c.Set(ctx, "user:1", `{"risk": 0.9, "tier": "gold"}`, 0)
	c.Set(ctx, "user:bad", `[1, 2]`, 0)
	c.HSet(ctx, "hash:1", "risk", "0.1", "country", "FR")

	type result struct {
		Value map[string]any
		Err   string
	}
	cases := []struct {
		mode RedisMode
		key  string
		want result
	}{
		{GetJSON, "user:1", result{Value: map[string]any{"risk": 0.9, "tier": "gold"}}},
		{GetJSON, "user:missing", result{Value: map[string]any{}}},
		{GetJSON, "user:bad", result{Err: `redis GET "user:bad": value is not a JSON object`}},
		{GetJSON, "hash:1", result{Err: `redis GET "hash:1": WRONGTYPE Operation against a key holding the wrong kind of value`}},
		{HashGetAll, "hash:1", result{Value: map[string]any{"risk": "0.1", "country": "FR"}}},
		{HashGetAll, "hash:missing", result{Value: map[string]any{}}},
	}
	for _, tc := range cases {
		r := NewRedis(c, tc.mode)
		v, err := r.Get(ctx, tc.key)
		got := result{Value: v}
		if err != nil {
			got.Err = err.Error()
			if !errors.As(err, new(*PermanentError)) {
				t.Errorf("Get(%q) error %v is not permanent", tc.key, err)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("mode %d Get(%q) (-want +got):\n%s", tc.mode, tc.key, diff)
		}
		// The pipelined path gives the same answer for every key.
		vals, errs := r.GetMany(ctx, []string{tc.key, tc.key})
		for i := range vals {
			got := result{Value: vals[i]}
			if errs[i] != nil {
				got.Err = errs[i].Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mode %d GetMany(%q)[%d] (-want +got):\n%s", tc.mode, tc.key, i, diff)
			}
		}
	}
}

// TestRedisPipelined runs many elements through one worker, so that it
// batches the waiting keys into pipelines.
func TestRedisPipelined(t *testing.T) {
	srv := startRedis(t, 0)
	c := newRedisClient(t, srv.addr())
	ctx := context.Background()
	const n = 500
	for i := range n {
		c.Set(ctx, "u"+strconv.Itoa(i), `{"i": `+strconv.Itoa(i)+`}`, 0)
	}
	op := newOp(t, NewRedis(c, GetJSON), Config{Timeout: 5 * time.Second, Capacity: 200, Workers: 1, Ordered: true})
	errc := submitAll(op, keys(n)) // keys k0.. are missing: empty maps
	outs := take(t, op, n, 10*time.Second)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil || o.Element != i || len(o.Value) != 0 {
			t.Fatalf("output %d: %+v", i, o)
		}
	}
	in := make([]string, n)
	for i := range in {
		in[i] = "u" + strconv.Itoa(i)
	}
	errc = submitAll(op, in)
	for i, o := range take(t, op, n, 10*time.Second) {
		if o.Err != nil || o.Value["i"] != float64(i) {
			t.Fatalf("output %d: %+v", i, o)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestRedisKilledMidStream kills redis-server while elements flow: every
// element still completes, with a fallback, within its timeout (soon failing
// fast on the open breaker); a new server on the same port brings lookups
// back once the breaker's probe succeeds.
func TestRedisKilledMidStream(t *testing.T) {
	srv := startRedis(t, 0)
	c := newRedisClient(t, srv.addr())
	ctx := context.Background()
	seed := func() {
		for i := range 10 {
			if err := c.Set(ctx, "k"+strconv.Itoa(i), `{"ok": true}`, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	seed()
	const timeout = 300 * time.Millisecond
	op := newOp(t, NewRedis(c, GetJSON, Breaker(3, 100*time.Millisecond)), Config{
		Timeout: timeout, Capacity: 20, Retries: 2, Backoff: 5 * time.Millisecond,
		Fallback: map[string]any{"ok": false},
	})
	// run submits n elements, each carrying its submit time, and returns
	// their outputs with the time each took.
	run := func(n int) ([]Output, []time.Duration) {
		t.Helper()
		errc := make(chan error, 1)
		go func() {
			for i := range n {
				if err := op.Submit(ctx, "k"+strconv.Itoa(i%10), time.Now()); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		outs := take(t, op, n, 10*time.Second)
		took := make([]time.Duration, n)
		for i, o := range outs {
			took[i] = time.Since(o.Element.(time.Time))
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return outs, took
	}

	for _, o := range first(run(50)) {
		if o.Err != nil {
			t.Fatalf("before the kill: %+v", o)
		}
	}
	srv.kill()
	outs, took := run(100)
	circuitOpen := 0
	for i, o := range outs {
		if o.Err == nil || o.Value["ok"] != false || o.Value["_error"] == nil {
			t.Fatalf("after the kill, output %d: %+v, want a fallback", i, o)
		}
		// Generous: the bound shows "completes by its deadline", not speed.
		if took[i] > timeout+time.Second {
			t.Errorf("after the kill, output %d took %v (timeout %v)", i, took[i], timeout)
		}
		if errors.Is(o.Err, ErrCircuitOpen) {
			circuitOpen++
		}
	}
	if circuitOpen == 0 {
		t.Errorf("no fallback came from the open circuit breaker; stats %+v", op.Stats())
	}
	t.Logf("after the kill: %d of %d fallbacks from the open breaker; stats %+v", circuitOpen, len(outs), op.Stats())

	startRedis(t, srv.port) // the same port: the lookup reconnects to it
	seed()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond) // paces the probes, the breaker cools down meanwhile
	defer tick.Stop()
	for {
		if o := first(run(1))[0]; o.Err == nil && o.Value["ok"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 5s after redis-server restarted; stats %+v", op.Stats())
		}
		<-tick.C
	}
	for _, o := range first(run(50)) {
		if o.Err != nil {
			t.Fatalf("after recovery: %+v", o)
		}
	}
}

// TestRedisPaused pauses every client of redis-server for 2s: each element
// completes with a fallback by its deadline, long before the pause ends.
func TestRedisPaused(t *testing.T) {
	srv := startRedis(t, 0)
	c := newRedisClient(t, srv.addr())
	ctx := context.Background()
	const timeout = 200 * time.Millisecond
	op := newOp(t, NewRedis(c, HashGetAll), Config{Timeout: timeout, Capacity: 10, Retries: 1})
	op.Submit(ctx, "warm", time.Now())
	if o := take(t, op, 1, 5*time.Second)[0]; o.Err != nil {
		t.Fatalf("before the pause: %+v", o)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1})
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const n = 30
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			if err := op.Submit(ctx, "k"+strconv.Itoa(i), time.Now()); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, o := range take(t, op, n, 5*time.Second) {
		if o.Err == nil || o.Value["_error"] == nil {
			t.Fatalf("output %d during the pause: %+v, want a fallback", i, o)
		}
		if took := time.Since(o.Element.(time.Time)); took > timeout+500*time.Millisecond {
			t.Errorf("output %d took %v, deadline %v", i, took, timeout)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if all := time.Since(start); all > 1500*time.Millisecond {
		t.Errorf("%d elements took %v: the pause (2s) was waited out", n, all)
	}
	t.Logf("stats %+v", op.Stats())
}

func first[A, B any](a A, _ B) A { return a }
