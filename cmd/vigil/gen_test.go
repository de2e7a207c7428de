package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/kafka"
)

// The producing itself (placement, order, pacing, the summary's lines) is
// tested with workload.Produce; these tests hold the command to its flags,
// outputs and exit statuses.

// genBroker starts an embedded broker with the workload's topics,
// partitions partitions each.
func genBroker(t *testing.T, partitions int32) *kafka.Broker {
	t.Helper()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	for _, topic := range workload.Streams() {
		if err := b.Cluster().CreateTopic(topic, partitions, nil); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// topicRecords counts the records of the workload's topics.
func topicRecords(t *testing.T, addr string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), workload.Streams()...)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// TestGenBrokers: gen --brokers produces the workload to Kafka, nothing to
// standard output, its report to standard error, and --truth the planted
// cases of the file gen writes with the same flags.
func TestGenBrokers(t *testing.T) {
	b := genBroker(t, 3)
	dir := t.TempDir()
	truth, fileTruth := filepath.Join(dir, "truth.ndjson"), filepath.Join(dir, "file-truth.ndjson")
	flags := []string{"--events", "6000", "--users", "400", "--seed", "7", "--truth"}
	code, stdout, stderr := runCLI(t, append([]string{"gen", "--brokers", b.Addr(), "--send-rate", "0", "--progress", "0"}, append(flags, truth)...)...)
	if code != 0 {
		t.Fatalf("gen --brokers: exit %d\n%s", code, stderr)
	}
	t.Log(stderr)
	if stdout != "" {
		t.Errorf("stdout: %q, want nothing (the records went to Kafka)", stdout)
	}
	for _, w := range []string{"vigil gen: 6000 records to kafka " + b.Addr() + " via PLAINTEXT: transactions, logins, devices (3 partitions each), " +
		"as fast as the brokers take them\n", "vigil gen: 6000 records acknowledged", "vigil gen: 0 produce errors\n"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if n := topicRecords(t, b.Addr()); n != 6000 {
		t.Errorf("%d records on the topics, want 6000", n)
	}
	if code, _, stderr := runCLI(t, append([]string{"gen", "--out", filepath.Join(dir, "events.ndjson")}, append(flags, fileTruth)...)...); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, stderr)
	}
	got, err := os.ReadFile(truth)
	want, err2 := os.ReadFile(fileTruth)
	if err != nil || err2 != nil || len(want) == 0 || !bytes.Equal(got, want) {
		t.Errorf("--truth with --brokers: %v, %v, %d bytes; want the %d bytes of the file's planted cases", err, err2, len(got), len(want))
	}
}

// cancelOnWrite cancels the run at its first write: gen --brokers's start
// line, just before the first record would be sent.
type cancelOnWrite struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(b []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(b)
}

// TestGenBrokersInterrupted: an interrupted gen --brokers writes its summary
// and its error to standard error, no --truth file, and exits 1.
func TestGenBrokersInterrupted(t *testing.T) {
	b := genBroker(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout bytes.Buffer
	stderr := &cancelOnWrite{cancel: cancel}
	truth := filepath.Join(t.TempDir(), "truth.ndjson")
	code := run(ctx, []string{"gen", "--brokers", b.Addr(), "--events", "100", "--users", "10", "--send-rate", "0", "--progress", "0", "--truth", truth}, &stdout, stderr)
	t.Log(stderr.String())
	if want := "vigil gen: 0 produce errors\nvigil gen: interrupted after 0 of 100 records\n"; code != 1 || !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("exit %d, want 1 and stderr ending %q:\n%s", code, want, stderr.String())
	}
	if _, err := os.Stat(truth); !os.IsNotExist(err) {
		t.Errorf("--truth written after an interrupted run: %v", err)
	}
}

// TestGenFile: without --brokers the workload goes to --out (standard output
// by default) as NDJSON, or with --kafka as one stream's kcat lines; --fraud
// 0 plants nothing.
func TestGenFile(t *testing.T) {
	c := workload.Config{Events: 1000, Users: 100, Seed: 3}
	var ndjson, kcat bytes.Buffer
	planted, err := workload.Generate(&ndjson, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workload.GenerateKcat(&kcat, c, "logins"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	flags := []string{"gen", "--events", "1000", "--users", "100", "--seed", "3"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stdout", nil, ndjson.String()},
		{"kafka", []string{"--kafka", "logins"}, kcat.String()},
	} {
		code, stdout, stderr := runCLI(t, append(flags, tc.args...)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("%s: exit %d, %d bytes of stdout, stderr %q; want 0 and %d bytes", tc.name, code, len(stdout), stderr, len(tc.want))
		}
		out, truth := filepath.Join(dir, tc.name+".out"), filepath.Join(dir, tc.name+".truth")
		code, stdout, stderr = runCLI(t, append(flags, append(tc.args, "--out", out, "--truth", truth)...)...)
		got, err := os.ReadFile(out)
		if code != 0 || stdout != "" || err != nil || string(got) != tc.want {
			t.Errorf("%s --out: exit %d, stdout %q, stderr %q, file %d bytes (%v); want 0, nothing and %d bytes", tc.name, code, stdout, stderr, len(got), err, len(tc.want))
		}
		if lines, err := os.ReadFile(truth); err != nil || bytes.Count(lines, []byte("\n")) != len(planted) {
			t.Errorf("%s --truth: %v, %q; want the %d planted cases", tc.name, err, lines, len(planted))
		}
	}
	truth := filepath.Join(dir, "none.truth")
	if code, _, stderr := runCLI(t, append(flags, "--fraud", "0", "--truth", truth)...); code != 0 {
		t.Fatalf("--fraud 0: exit %d\n%s", code, stderr)
	}
	if b, err := os.ReadFile(truth); err != nil || len(b) != 0 {
		t.Errorf("--fraud 0 --truth: %v, %q; want an empty file", err, b)
	}
}

// TestGenFlags: the flags that write files do not go with --brokers, nor
// --send-rate or --progress without it: usage, exit status 2.
func TestGenFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--brokers", "127.0.0.1:1", "--out", "x"}, "--out writes a file; with --brokers the workload goes to Kafka"},
		{[]string{"--brokers", "127.0.0.1:1", "--kafka", "logins"}, "--kafka writes a file; with --brokers the workload goes to Kafka"},
		{[]string{"--brokers", "127.0.0.1:1", "--partitions", "4"}, "--partitions writes a file; with --brokers the workload goes to Kafka"},
		{[]string{"--brokers", "127.0.0.1:1", "--send-rate", "-1"}, "--send-rate must be a finite number of records per second, 0 or more, not -1"},
		{[]string{"--send-rate", "100"}, "--send-rate is for --brokers (without, the workload is written to a file)"},
		{[]string{"--progress", "1s"}, "--progress is for --brokers (without, the workload is written to a file)"},
	} {
		code, _, stderr := runCLI(t, append([]string{"gen"}, tc.args...)...)
		if code != 2 || !strings.HasPrefix(stderr, tc.msg+"\nUsage: vigil gen ") {
			t.Errorf("gen %v: exit %d, want 2 (usage) after %q\n%s", tc.args, code, tc.msg, stderr)
		}
	}
}

// A VIGIL_KAFKA_* variable left in the environment does not turn gen into a
// producer: only --brokers or --kafka-properties does.
func TestGenEnvironmentDoesNotProduce(t *testing.T) {
	t.Setenv("VIGIL_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
	code, out, stderr := runCLI(t, "gen", "--events", "300", "--users", "30")
	if code != 0 || !strings.HasPrefix(out, `{"stream":`) {
		t.Fatalf("exit %d, stdout %.80q, stderr %q; want the NDJSON workload on stdout", code, out, stderr)
	}
}
