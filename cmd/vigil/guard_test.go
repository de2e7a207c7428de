package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// slowRules reads an enrichment whose value the cost bound assumes is no
// larger than a field (512 bytes): the test's lookup server answers with a
// list of 3 million numbers, which the rule iterates (about 100 ms per
// evaluation here) with nothing in it that a guard can stop mid-way.
const slowRules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
enrichments:
  profile: {stream: tx, http: {url: "%s/{key}", key: user_id, max_body: 16000000}, timeout: 10s, cache: {size: 100, ttl: 1h}}
rules:
  fine: {stream: tx, action: review, when: 'amount > 100'}
  slow: {stream: tx, action: block, when: 'amount > 0 && all(profile.items, # >= 0)'}
`

// TestServeQuarantinesSlowRule (issue 14, Must show 2): a rule that passes
// the static bound but runs longer than the rule time limit is stopped and
// quarantined (disabled in a new version by "vigil", counted in /metrics);
// decisions and entity reads keep answering within their deadline; and
// SIGTERM while a slow rule runs ends the service, exit status 0, within its
// shutdown timeout.
func TestServeQuarantinesSlowRule(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	profile := []byte(`{"items":[0` + strings.Repeat(",0", 3_000_000) + `]}`)
	lookups := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(profile) }))
	defer lookups.Close()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(fmt.Sprintf(slowRules, lookups.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	const shutdownTimeout = 20 * time.Second
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--rules", rulesPath,
		"--data-dir", filepath.Join(dir, "state"), "--partitions", "1", "--rule-time-limit", "20ms",
		"--request-timeout", "10s", "--shutdown-timeout", shutdownTimeout.String())
	c := &apiClient{t: t, base: strings.TrimSuffix(lastField(line), ")")}
	waitReady(t, c)

	// /readyz, polled while the decisions run, says which task and rule.
	var notReady []string
	var readyMu sync.Mutex
	pollDone := make(chan struct{})
	var poller sync.WaitGroup
	poller.Go(func() {
		for {
			select {
			case <-pollDone:
				return
			default:
			}
			if resp, err := http.Get(c.base + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 503 {
					readyMu.Lock()
					notReady = append(notReady, string(b))
					readyMu.Unlock()
				}
			}
		}
	})

	// Decide until the quarantine lands; every request answers in time.
	quarantined := false
	var stoppedSeen bool
	for i := 0; i < 500 && !quarantined; i++ {
		resp, body := c.do("POST", "/v1/decisions?stream=tx", fmt.Sprintf(`{"tx_id":"q%d","user_id":"u1","amount":5,"ts":%d}`, i, 1000+i))
		if resp.StatusCode != 200 {
			t.Fatalf("decision %d: %d %s", i, resp.StatusCode, body)
		}
		stoppedSeen = stoppedSeen || strings.Contains(body, "rule slow: stopped: the evaluation ran longer than the rule time limit")
		if resp, body := c.do("GET", "/v1/entities/u1", ""); resp.StatusCode != 200 {
			t.Fatalf("entity: %d %s", resp.StatusCode, body)
		}
		_, audit := c.do("GET", "/v1/audit", "")
		quarantined = strings.Contains(audit, `"author":"vigil"`)
	}
	close(pollDone)
	poller.Wait()
	if !quarantined || !stoppedSeen {
		t.Fatalf("after 500 decisions: quarantined %v, a decision recorded the stop %v; stderr:\n%s", quarantined, stoppedSeen, p.logs())
	}
	if !slices.ContainsFunc(notReady, func(b string) bool {
		return strings.Contains(b, "task 0 is stuck in rule slow: one evaluation has run for")
	}) {
		t.Errorf("/readyz never named the stuck task and rule; its 503 answers: %q", notReady)
	}
	_, audit := c.do("GET", "/v1/audit", "")
	if !strings.Contains(audit, "quarantined: an evaluation of rule slow ran longer than the rule time limit of 20ms") {
		t.Errorf("audit: %s", audit)
	}
	resp, body := c.do("GET", "/v1/rules/slow", "")
	var rule struct{ Mode string }
	if json.Unmarshal([]byte(body), &rule); resp.StatusCode != 200 || rule.Mode != "disabled" {
		t.Errorf("GET /v1/rules/slow: %d %s", resp.StatusCode, body)
	}
	// Counted once the publication returns, which can be just after the
	// audit log shows the version: poll.
	for i := 0; ; i++ {
		if _, body := c.do("GET", "/metrics", ""); strings.Contains(body, `vigil_rules_quarantined_total{rule="slow"} 1`) {
			break
		}
		if i == 100 {
			t.Fatal("/metrics has no quarantine of slow after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, body := c.do("POST", "/v1/decisions?stream=tx", `{"tx_id":"after","user_id":"u1","amount":500,"ts":5000}`); resp.StatusCode != 200 ||
		!strings.Contains(body, `"action":"review"`) || strings.Contains(body, "slow") {
		t.Errorf("a decision after the quarantine: %d %s", resp.StatusCode, body)
	}
	waitReady(t, c)

	// An analyst switches it on again; SIGTERM comes while it runs.
	resp, _ = c.do("GET", "/v1/ruleset", "")
	resp, body = c.do("PUT", "/v1/rules/slow", `{"stream":"tx","action":"block","mode":"active","when":"amount > 0 && all(profile.items, # >= 0)"}`,
		"If-Match", resp.Header.Get("ETag"))
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /v1/rules/slow: %d %s", resp.StatusCode, body)
	}
	var wg sync.WaitGroup
	stop, running := make(chan struct{}), make(chan struct{})
	var once sync.Once
	wg.Go(func() { // decisions in flight through the shutdown
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("POST", c.base+"/v1/decisions?stream=tx",
				strings.NewReader(fmt.Sprintf(`{"tx_id":"s%d","user_id":"u2","amount":5,"ts":%d}`, i, 9000+i)))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if i >= 2 {
					once.Do(func() { close(running) }) // the slow rule is running
				}
			}
		}
	})
	<-running
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		close(stop)
		wg.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("vigil serve after SIGTERM: %v; stderr:\n%s", err, p.logs())
		}
		t.Logf("SIGTERM to exit: %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(shutdownTimeout + 5*time.Second):
		close(stop)
		t.Fatalf("vigil serve still running %s after SIGTERM; stderr:\n%s", shutdownTimeout+5*time.Second, p.logs())
	}
}

// waitReady polls /readyz until it answers 200 (the group join, or a
// quarantine landing).
func waitReady(t *testing.T, c *apiClient) {
	t.Helper()
	for i := 0; ; i++ {
		resp, body := c.do("GET", "/readyz", "")
		if resp.StatusCode == 200 {
			return
		}
		if i == 300 {
			t.Fatalf("/readyz not 200 after 30s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
