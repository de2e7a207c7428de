package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestUsage: --help on the command and on each subcommand prints the usage
// and exits 0; a missing or unknown subcommand, or bad flags, exit 2.
func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: vigil-bench <command>"},
		{[]string{"--help"}, 0, "  bench     measure throughput and latency"},
		{[]string{"-h"}, 0, "  loadtest  send decision requests"},
		{[]string{"nope"}, 2, "vigil-bench: unknown command \"nope\"\n\nvigil-bench: measure"},
		{[]string{"serve"}, 2, `unknown command "serve"`},
		{[]string{"bench", "--help"}, 0, "Usage: vigil-bench bench [--events N]"},
		{[]string{"loadtest", "--help"}, 0, "Usage: vigil-bench loadtest [--url URL]"},
		{[]string{"bench", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"bench", "extra"}, 2, "unexpected arguments: extra"},
		{[]string{"bench", "--events", "0", "--runs", "51"}, 2, "--events must be positive\n--runs must be between 1 and 50\nUsage: vigil-bench bench"},
		{[]string{"bench", "--profile-phase", "warmup"}, 2, "--profile-phase must be passthrough, replay, kafka or latency"},
		{[]string{"loadtest", "--rate", "x"}, 2, `invalid value "x" for flag -rate`},
		{[]string{"loadtest", "--rate", "0", "--workers", "0"}, 2, "--rate must be positive\n--workers must be positive\nUsage: vigil-bench loadtest"},
		{[]string{"compare", "--help"}, 0, "Usage: vigil-bench compare [flags] SERVER..."},
		{[]string{"compare"}, 2, "give at least one SERVER\nUsage: vigil-bench compare"},
		{[]string{"compare", "--rounds", "0", "bare"}, 2, "--rounds 0: give a positive number"},
	} {
		var out strings.Builder // stdout and stderr together: the usage goes to stderr
		if code := program().Run(context.Background(), tt.args, &out, &out); code != tt.code || !strings.Contains(out.String(), tt.want) {
			t.Errorf("vigil-bench %q: exit %d, output %q; want exit %d and %q", tt.args, code, out.String(), tt.code, tt.want)
		}
	}
}

// TestLoadtestCommand runs a short loadtest against a stand-in for POST
// /v1/decisions on loopback: every request is a decision request with the
// token, each answered, and the forwarded ones (Vigil-Forwarded-To) are
// reported apart, and so are the slots of --timeline.
func TestLoadtestCommand(t *testing.T) {
	var n, bad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tx struct {
			TxID   string `json:"tx_id"`
			UserID string `json:"user_id"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/decisions" || r.URL.Query().Get("stream") != "payments" ||
			r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" ||
			json.NewDecoder(r.Body).Decode(&tx) != nil || !strings.HasPrefix(tx.TxID, "lt-") || tx.UserID == "" {
			bad.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if n.Add(1)%2 == 0 {
			w.Header().Set("Vigil-Forwarded-To", "other")
		}
		w.Write([]byte(`{"action":"allow"}`))
	}))
	defer srv.Close()

	var out, errOut bytes.Buffer
	code := program().Run(context.Background(), []string{"loadtest", "--url", srv.URL, "--stream", "payments", "--token", "tok",
		"--rate", "200", "--duration", "100ms", "--workers", "4", "--timeline", "50ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut.String())
	}
	var r loadResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not one JSON line: %v\n%s", err, out.String())
	}
	if r.Rate != 200 || r.Sent != 20 || r.OK != 20 || r.Errors != 0 || bad.Load() != 0 {
		t.Errorf("rate %d, sent %d, ok %d, errors %d (%d bad requests); want 200, 20, 20, 0, 0", r.Rate, r.Sent, r.OK, r.Errors, bad.Load())
	}
	if r.Local == nil || r.Forwarded == nil || r.Local.OK+r.Forwarded.OK != r.OK || r.Forwarded.OK != 10 {
		t.Errorf("local %+v, forwarded %+v: want 10 of the 20 forwarded", r.Local, r.Forwarded)
	}
	if !(0 <= r.P50 && r.P50 <= r.P99 && r.P99 <= r.Max) {
		t.Errorf("p50 %v, p99 %v, max %v: want 0 <= p50 <= p99 <= max", r.P50, r.P99, r.Max)
	}
	// 20 requests due every 5 ms: ten in each 50 ms slot.
	if len(r.Timeline) != 2 || r.Timeline[0].From != 0 || r.Timeline[1].From != 0.05 ||
		r.Timeline[0].OK != 10 || r.Timeline[1].OK != 10 || r.Timeline[1].Max > r.Max {
		t.Errorf("timeline %+v: want two slots of 10, from 0 and 0.05 s", r.Timeline)
	}
}

// TestLoadtestBare: loadtest against the bare handler: every request is
// answered with a decision record of its own transaction.
func TestLoadtestBare(t *testing.T) {
	srv := httptest.NewServer(bareHandler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/decisions?stream=transactions", "application/json",
		strings.NewReader(`{"tx_id":"t\"1","user_id":"u1","amount":5,"ts":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var d struct {
		Decision struct{ ID, Key, Action string }
	}
	if err := json.Unmarshal(body, &d); resp.StatusCode != 200 || err != nil || d.Decision.ID != `t"1` || d.Decision.Key != "u1" || d.Decision.Action != "allow" {
		t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
	}
	if resp, err := http.Post(srv.URL+"/v1/decisions", "application/json", strings.NewReader(`{`)); err != nil {
		t.Error(err)
	} else if resp.Body.Close(); resp.StatusCode != 400 {
		t.Errorf("malformed JSON: %d, want 400", resp.StatusCode)
	}
	var out, errOut bytes.Buffer
	if code := program().Run(context.Background(), []string{"loadtest", "--url", srv.URL, "--rate", "200", "--duration", "100ms",
		"--workers", "4", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut.String())
	}
	var r loadResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.OK != 20 || r.Errors != 0 {
		t.Errorf("loadtest against bare: %+v, %v", r, err)
	}
}
