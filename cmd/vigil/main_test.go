package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateCommand(t *testing.T) {
	code, out, _ := runCLI(t, "validate", "../../rules/testdata/three_mistakes.yaml")
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	for _, want := range []string{
		"three_mistakes.yaml:8:65: rules.many_ips.when: unexpected token EOF",
		"three_mistakes.yaml:10:13: rules.big.stream: unknown stream \"transactoins\"",
		"three_mistakes.yaml:16:13: rules.slow.action: action must be allow, review or block, not \"stop\"",
		"3 error(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI(t, "validate", "../../examples/fraud.yaml"); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("the example ruleset: exit %d, %s", code, out)
	}
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "events.ndjson")
	out := filepath.Join(dir, "out.ndjson")
	if code, _, stderr := runCLI(t, "gen", "--events", "3000", "--users", "300", "--out", events, "--truth", filepath.Join(dir, "truth.ndjson")); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	code, _, stderr := runCLI(t, "replay", "--rules", "../../examples/fraud.yaml", "--events", events, "--out", out)
	if code != 0 || !strings.Contains(stderr, "replayed 3000 records") {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(b, []byte(`"kind":"decision"`)) {
		t.Fatalf("replay output: %v, %.200s", err, b)
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: vigil <command>"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"bench"}, 2, `unknown command "bench"`}, // a tool of vigil-bench, not of the product
		{[]string{"loadtest"}, 2, `unknown command "loadtest"`},
		{[]string{"replay", "--help"}, 0, "Usage: vigil replay RULES.yaml"},
		{[]string{"replay"}, 2, "a ruleset is required (RULES.yaml, or --rules)"},
		{[]string{"replay", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"validate"}, 2, "Usage: vigil validate [--max-record-bytes N] RULES.yaml"},
		{[]string{"gen", "--users", "-1"}, 1, "--users -1: give a positive number"},
		{[]string{"serve", "--heap-ratio", "0.5"}, 1, "--heap-ratio 0.5: give 0 (off) or a multiple above 1"},
		{[]string{"serve", "--fetch-max-wait", "5ms"}, 1, "--fetch-max-wait 5ms: give 10ms to 1m"},
		{[]string{"serve", "--fetch-min-bytes", "0"}, 1, "--fetch-min-bytes 0: give 1 to 1048576"},
		{[]string{"serve", "--queue-batches", "0"}, 1, "--queue-batches 0: give a positive number"},
		{[]string{"serve", "--partitions", "-2"}, 1, "--partitions -2: give a positive number"},
		{[]string{"serve", "--shutdown-timeout", "-1s"}, 1, "--shutdown-timeout -1s: give a positive duration"},
		{[]string{"serve", "--checkpoint-interval", "0s"}, 1, "--checkpoint-interval 0s: give a positive duration"},
		{[]string{"serve", "--linger", "-1ms"}, 1, "--linger -1ms: give 0 (send at once) or a positive duration"},
		{[]string{"broker", "--partitions", "0"}, 1, "--partitions 0: give a positive number"},
		{[]string{"gen", "--events", "0"}, 1, "--events 0: give a positive number"},
		{[]string{"gen", "--rate", "-5"}, 1, "--rate -5: give a positive number"},
		{[]string{"replay", "--max-record-bytes", "0", "r.yaml"}, 1, "--max-record-bytes 0: give a positive number"},
		{[]string{"validate", "--max-record-bytes", "-1", "r.yaml"}, 1, "--max-record-bytes -1: give a positive number"},
	}
	for _, tt := range tests {
		code, out, errOut := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("vigil %v: exit %d, output %q; want exit %d and %q", tt.args, code, out+errOut, tt.code, tt.want)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "vigil ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}
