package asyncio

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// pause waits d or until ctx ends: the injected latency of fake servers.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take reads n outputs from op, failing the test if they do not come within
// wait.
func take(t *testing.T, op *Operator, n int, wait time.Duration) []Output {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	outs := make([]Output, 0, n)
	for len(outs) < n {
		select {
		case o, ok := <-op.Results():
			if !ok {
				t.Fatalf("results closed after %d of %d outputs", len(outs), n)
			}
			outs = append(outs, o)
		case <-deadline.C:
			t.Fatalf("got %d of %d outputs within %v; stats %+v", len(outs), n, wait, op.Stats())
		}
	}
	return outs
}

// submitAll submits keys in a goroutine (the feeder) so that the test can
// read Results meanwhile; errors are reported on the returned channel.
func submitAll(op *Operator, keys []string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for i, k := range keys {
			if err := op.Submit(context.Background(), k, i); err != nil {
				errc <- fmt.Errorf("submit %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	return errc
}

func newOp(t *testing.T, l Lookup, cfg Config) *Operator {
	t.Helper()
	op, err := New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.Close() })
	return op
}

// noLeaks fails the test if the goroutine count does not come back to before
// within a few seconds (goroutines of other parts wind down asynchronously).
func noLeaks(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want <= %d:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// redisServer is a real redis-server on a loopback port, killed at cleanup.
type redisServer struct {
	port int
	cmd  *exec.Cmd
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// startRedis starts redis-server on port (0: a free one) and waits until it
// answers PING.
func startRedis(t *testing.T, port int) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &redisServer{port: port, cmd: cmd}
	t.Cleanup(s.kill)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer PING", s.addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// kill stops the server and waits for it; idempotent.
func (r *redisServer) kill() {
	if r.cmd.ProcessState != nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// newRedisClient returns a client with per-call deadlines honoured, as
// Redis requires.
func newRedisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
