package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const routingRules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  velocity: {stream: tx, action: review, when: 'len(history("tx", "1h")) > 1', reason: '"n=" + string(len(history("tx", "1h")))'}
`

// routingGroup is one `vigil broker` and n `vigil serve` in one group, each
// with its own API, the same keys and the same peer secret.
type routingGroup struct {
	broker string
	procs  []*proc
	apis   []*apiClient
	addrs  []string // host:port of each API
}

func startRoutingGroup(t *testing.T, n int) *routingGroup {
	t.Helper()
	t.Setenv("VIGIL_API_KEYS", "gw:decider:fedcba9876543210fedc,ops:admin:0123456789abcdef0123")
	t.Setenv("VIGIL_PEER_SECRET", "the-group-secret-0123456789abcdef0123")
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(routingRules), 0o644)
	g := &routingGroup{}
	_, line := startVigil(t, "vigil broker listening on", "broker", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "broker"))
	g.broker = lastField(line)
	for i := range n {
		p, line := startVigil(t, "vigil serving", "serve", "--brokers", g.broker, "--rules", rules, "--partitions", "6",
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--instance-id", fmt.Sprintf("vigil-%d", i),
			"--session-timeout", "6s", "--checkpoint-interval", "1s")
		addr := strings.TrimPrefix(strings.TrimSuffix(lastField(line), ")"), "http://")
		g.procs = append(g.procs, p)
		g.addrs = append(g.addrs, addr)
		g.apis = append(g.apis, &apiClient{t: t, base: "http://" + addr, token: "fedcba9876543210fedc"})
	}
	return g
}

// waitRouted waits until every instance answers a decision for every one
// of probe users (so the group is stable and every instance knows it).
func (g *routingGroup) waitRouted(t *testing.T, users int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok := true
		for i, api := range g.apis {
			for u := range users {
				code, _, _ := api.post(fmt.Sprintf(`{"tx_id":"probe-%d-%d","user_id":"probe-%d","amount":1,"ts":1}`, i, u, u))
				if code != http.StatusOK {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group does not route after 90s; logs:\n%s", g.procs[0].logs())
		}
		time.Sleep(200 * time.Millisecond) // polling the group's rebalance
	}
}

// post posts a decision and returns its status, body and the instance that
// made it (Vigil-Forwarded-To, or this one).
func (c *apiClient) post(body string) (int, string, http.Header) {
	req, _ := http.NewRequest("POST", c.base+"/v1/decisions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(resp))
	return resp.StatusCode, b.String(), resp.Header
}

func readAll(resp *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// TestServeRoutesAnyKey: three instances in one group behind no load
// balancer: decisions for 1,000 users sent round-robin to the three APIs are
// all answered 200, each made by the owner of its key's partition (the
// entity view names it, and it holds the event); the same id sent to
// another instance returns the stored decision, another body 409.
func TestServeRoutesAnyKey(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	g := startRoutingGroup(t, 3)
	g.waitRouted(t, 6)

	const users = 1000
	decidedBy := make([]string, users)
	bodies := make([]string, users)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range users {
		wg.Go(func() {
			api := g.apis[i%3]
			body := fmt.Sprintf(`{"tx_id":"rt-%d","user_id":"user-%d","amount":%d,"ts":%d}`, i, i, 10+i, 1000+i)
			code, resp, hdr := api.post(body)
			if code != http.StatusOK {
				t.Errorf("user %d via instance %d: %d %s", i, i%3, code, resp)
				return
			}
			by := hdr.Get("Vigil-Forwarded-To")
			if by == "" {
				by = g.addrs[i%3]
			}
			mu.Lock()
			decidedBy[i], bodies[i] = by, body
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	forwarded := 0
	for i := range users {
		if decidedBy[i] != g.addrs[i%3] {
			forwarded++
		}
		if i%50 != 0 { // the entity of every 50th user, from another instance
			continue
		}
		ops := &apiClient{t: t, base: g.apis[(i+1)%3].base, token: "0123456789abcdef0123"}
		resp, body := ops.do("GET", fmt.Sprintf("/v1/entities/user-%d", i), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("entity user-%d: %d %s", i, resp.StatusCode, body)
		}
		var e struct {
			Instance string `json:"instance"`
			History  map[string][]struct {
				Event struct {
					TxID string `json:"tx_id"`
				} `json:"event"`
			} `json:"history"`
		}
		json.Unmarshal([]byte(body), &e)
		if e.Instance != decidedBy[i] || len(e.History["tx"]) != 1 || e.History["tx"][0].Event.TxID != fmt.Sprintf("rt-%d", i) {
			t.Errorf("user-%d: decided by %s, entity says instance %q with history %s", i, decidedBy[i], e.Instance, body)
		}
	}
	if forwarded < users/3 {
		t.Errorf("only %d of %d requests were forwarded: is the group spread over three instances?", forwarded, users)
	}

	// Every decision is on vigil.decisions once.
	recs := consume(t, g.broker, "vigil.decisions")
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.key]++
	}
	for i := range users {
		if n := seen[fmt.Sprintf("rt-%d", i)]; n != 1 {
			t.Errorf("rt-%d: %d records on vigil.decisions, want 1", i, n)
		}
	}

	// Idempotency across instances.
	for _, i := range []int{0, 1, 2, 500, 999} {
		api := g.apis[(i+1)%3]
		code, body, hdr := api.post(bodies[i])
		if code != http.StatusOK || hdr.Get("Idempotent-Replay") != "true" {
			t.Errorf("rt-%d again via another instance: %d replay=%q %s", i, code, hdr.Get("Idempotent-Replay"), body)
		}
		code, body, _ = api.post(strings.Replace(bodies[i], `"amount":`, `"amount":1`, 1))
		if code != http.StatusConflict {
			t.Errorf("rt-%d with another body via another instance: %d %s, want 409", i, code, body)
		}
	}
}

// TestServeRoutingFailover: one of three instances is killed while requests
// flow to the two others: every request is answered, 200 or 503 with
// Retry-After, and once the group has moved the dead instance's partitions
// (after its session timeout) every request succeeds again.
func TestServeRoutingFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	g := startRoutingGroup(t, 3)
	g.waitRouted(t, 6)

	var sent, ok200, unavailable atomic.Int64
	var bad sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				api := g.apis[1+(n+w)%2] // the survivors
				code, body, hdr := api.post(fmt.Sprintf(`{"tx_id":"fo-%d-%d","user_id":"fo-user-%d","amount":5,"ts":%d}`, w, n, n%300, n))
				sent.Add(1)
				switch {
				case code == http.StatusOK:
					ok200.Add(1)
				case code == http.StatusServiceUnavailable && hdr.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					bad.Store(fmt.Sprintf("%d %s", code, body), true)
				}
			}
		})
	}
	for sent.Load() < 200 { // requests flowing before the kill
		time.Sleep(10 * time.Millisecond)
	}
	g.procs[0].cmd.Process.Signal(syscall.SIGKILL)
	g.procs[0].cmd.Wait()
	killed := time.Now()

	// After the session timeout (6 s) and a rebalance, a full round of
	// requests for every user succeeds.
	deadline := killed.Add(60 * time.Second)
	for {
		allOK := true
		for u := range 30 {
			code, _, _ := g.apis[1+u%2].post(fmt.Sprintf(`{"tx_id":"after-%d-%d","user_id":"fo-user-%d","amount":5,"ts":1}`, time.Now().UnixNano(), u, u*10))
			if code != http.StatusOK {
				allOK = false
			}
		}
		if allOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests still fail 60s after the kill; logs:\n%s", g.procs[1].logs())
		}
		time.Sleep(200 * time.Millisecond) // polling the rebalance
	}
	close(stop)
	wg.Wait()
	bad.Range(func(k, _ any) bool {
		t.Errorf("answer neither 200 nor 503 with Retry-After: %s", k)
		return true
	})
	t.Logf("%d requests: %d answered 200, %d 503 with Retry-After; every request succeeds %.1fs after the kill",
		sent.Load(), ok200.Load(), unavailable.Load(), time.Since(killed).Seconds())
}
