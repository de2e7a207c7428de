package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis runs a real redis-server on a free loopback port for the test
// and stops it at cleanup.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (./scripts/test installs it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if client.Ping(context.Background()).Err() == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer", addr)
		}
		time.Sleep(20 * time.Millisecond) // polling a starting server, not waiting for a result
	}
}

// TestReplayRedisEnrichment: vigil replay --redis enriches from a real Redis.
func TestReplayRedisEnrichment(t *testing.T) {
	addr := startRedis(t)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	if err := client.HSet(context.Background(), "profile:u1", "risk", "HIGH").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	events := filepath.Join(dir, "events.ndjson")
	os.WriteFile(rulesPath, []byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
enrichments:
  profile: {stream: tx, redis: {hash: '"profile:" + user_id'}, timeout: 500ms, fallback: {risk: UNKNOWN}}
rules:
  risky: {stream: tx, action: block, score: 50, when: 'profile.risk == "HIGH"'}
`), 0o644)
	os.WriteFile(events, []byte(`{"stream":"tx","value":{"tx_id":"a","user_id":"u1","ts":1}}
{"stream":"tx","value":{"tx_id":"b","user_id":"u2","ts":2}}
`), 0o644)
	code, out, stderr := runCLI(t, "replay", "--rules", rulesPath, "--events", events, "--redis", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"id":"a","stream":"tx","key":"u1","time":1,"action":"block"`) ||
		!strings.Contains(out, `"id":"b","stream":"tx","key":"u2","time":2,"action":"allow"`) {
		t.Errorf("decisions:\n%s", out)
	}
	if code, _, stderr := runCLI(t, "replay", "--rules", rulesPath, "--events", events); code != 1 || !strings.Contains(stderr, "give --redis ADDR") {
		t.Errorf("without --redis: exit %d, %s", code, stderr)
	}
}
