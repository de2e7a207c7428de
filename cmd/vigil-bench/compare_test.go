package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMain lets compare start this test binary as a server: the command
// line "TEST-BINARY bare --http ADDR", which compare runs for "bare", is
// vigil-bench itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bare" {
		os.Exit(program().Main())
	}
	os.Exit(m.Run())
}

// TestCompareCommand runs two rounds of two bare handlers, each started,
// loaded and stopped by compare: every run reports a CPU per request, no
// errors and a highest rate, and the summary gives the ratios to the first.
func TestCompareCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	args := []string{"compare", "--rounds", "2", "--rate", "100", "--warmup", "100ms", "--duration", "300ms",
		"--find-max", "--find-max-duration", "200ms", "--max-p99", "1s", "--workers", "4",
		"bare", self + " bare --http {addr}"}
	if code := program().Run(context.Background(), args, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	got := out.String()
	run := regexp.MustCompile(`(?m)^round [12]  server [12]  cpu/req (?:\?| *\d+ µs)  p50 .* errors 0  max rate \d+/s$`)
	if n := len(run.FindAllString(got, -1)); n != 4 {
		t.Errorf("%d runs reported with their CPU, no errors and a highest rate, want 4:\n%s", n, got)
	}
	// A CPU per request may be unknown ("?"): 30 requests can take less than the 10 ms a tick of /proc counts.
	summary := regexp.MustCompile(`(?m)^server 2  cpu ×[\d.?]+ \([\d.?]+ [\d.?]+\)  p99 ×[\d.]+ \([\d.]+ [\d.]+\)  max rate ×[\d.]+ \([\d.]+ [\d.]+\)$`)
	if !summary.MatchString(got) {
		t.Errorf("no ratios of server 2 to server 1:\n%s", got)
	}
}

// TestCompareServerFails: a server that exits before it is ready fails the
// comparison with its command and its output.
func TestCompareServerFails(t *testing.T) {
	var out strings.Builder
	code := program().Run(context.Background(), []string{"compare", "--rounds", "1", "sh -c echo_gone;exit_3"}, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "exited before it was ready") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

// TestStatCPU: user and system time from /proc/PID/stat, whose command name
// may hold spaces and parentheses.
func TestStatCPU(t *testing.T) {
	line := "4242 (vigil (x) y) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 567 0 0 20 0 9 0 100 0 0\n"
	if got, err := statCPU([]byte(line)); err != nil || got != 18010*time.Millisecond {
		t.Errorf("statCPU = %v, %v; want 18.01s", got, err)
	}
	for _, bad := range []string{"", "4242 (vigil) S 1 2", "4242 (vigil) S 1 4242 4242 0 -1 4194560 5000 0 0 0 x 567 0"} {
		if _, err := statCPU([]byte(bad)); err == nil {
			t.Errorf("statCPU(%q): no error", bad)
		}
	}
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Errorf("processCPU(self): %v", err)
	}
}
