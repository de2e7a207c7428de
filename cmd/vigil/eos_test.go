package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// eosRules make every kind of output the exactly-once test counts: a
// decision per transaction, a window result per user and minute, and an
// alert per two large payments in ten minutes. They read the transactions
// topic alone, so their outputs do not depend on how topics interleave.
const eosRules = `
streams:
  transactions: {topic: transactions, key: user_id, time: ts, id: tx_id, decide: true,
                 watermark: {max_out_of_order: 5s}}
windows:
  spend_1m: {stream: transactions, tumbling: 1m, aggregate: {count: count(), total: sum(amount)}}
patterns:
  big_twice:
    stream: transactions
    within: 10m
    steps:
      - {name: first, where: amount >= 500}
      - {name: second, where: amount >= 500}
rules:
  velocity:
    stream: transactions
    action: review
    score: 1
    when: 'true'
    reason: '"n=" + string(len(history("transactions", "1h"))) + " sum=" + string(sum(map(history("transactions", "1h"), .amount)))'
limits: {cost: 200000}
`

// kcat's isolation levels (librdkafka reads read_committed by default;
// they are spelled out here so that the test says what it reads).
var (
	readCommitted   = []string{"-X", "isolation.level=read_committed"}
	readUncommitted = []string{"-X", "isolation.level=read_uncommitted"}
)

// TestServeCrashExactlyOnce: vigil serve --delivery exactly-once is killed
// (SIGKILL) 20 times at random moments while the input is produced at a
// steady rate, with a checkpoint, and so a commit, every 200 ms and a base
// every third: kills land in open transactions, during commits and during
// compactions. A read_committed consumer (kcat) must then see exactly the
// decisions vigil replay makes of the same input, byte for byte, each as
// many times as replay emits it (once, and again for each re-sent
// transaction, as replay does), and every window result and alert once. On
// the embedded broker without security and with SASL (SCRAM-SHA-512) over
// TLS and ACLs.
func TestServeCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	for _, start := range []func(*testing.T) testCluster{plainCluster, tlsCluster} {
		c := start(t)
		t.Run(c.name, func(t *testing.T) { testCrashExactlyOnce(t, c) })
	}
}

func testCrashExactlyOnce(t *testing.T, c testCluster) {
	dir := t.TempDir()
	const kills = 20
	genArgs := []string{"--events", "24000", "--users", "1500", "--seed", "11"}
	rulesPath, lines := eosWorkload(t, dir, genArgs)
	serveArgs := append([]string{"serve", "--rules", rulesPath, "--data-dir", filepath.Join(dir, "state"),
		"--delivery", "exactly-once", "--checkpoint-interval", "200ms", "--checkpoint-base-every", "3"}, c.serve...)

	// The input, in order, over about as long as the kills take.
	produced := make(chan error, 1)
	go func() { produced <- produceSteadilyWith(c.opts, "transactions", lines, 15*time.Second) }()
	rng := time.Now().UnixNano()
	t.Logf("kill delays seeded with %d", rng)
	for range kills {
		p, _ := startVigil(t, "vigil serving", serveArgs...)
		rng = rng*6364136223846793005 + 1442695040888963407
		delay := 200*time.Millisecond + time.Duration(uint64(rng)>>33%1000)*time.Millisecond
		time.Sleep(delay) // a random moment to crash at
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}

	startVigil(t, "vigil serving", serveArgs...) // the last start, left to run
	recs := checkDecisionsOnce(t, c, rulesPath, genArgs)
	// An uncommitted read of the same topic shows what the crashes wrote
	// and aborted: the kills did land inside transactions.
	if all := len(c.consume(t, "vigil.decisions", readUncommitted...)); all <= len(recs) {
		t.Errorf("read_uncommitted sees %d decision records, read_committed %d: no kill landed in a transaction", all, len(recs))
	} else {
		t.Logf("aborted decision records: %d", all-len(recs))
	}
	checkOnce(t, c, "vigil.windows", rulesPath, genArgs, "window")
	checkOnce(t, c, "vigil.alerts", rulesPath, genArgs, "match")
}

// produceSteadilyWith produces lines ("key<TAB>value") to topic in order,
// through a client with opts, in equal slices every 100 ms over about d.
func produceSteadilyWith(opts []kgo.Opt, topic string, lines []string, d time.Duration) error {
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	const tick = 100 * time.Millisecond
	per := max(1, len(lines)/int(d/tick))
	for i := 0; i < len(lines); i += per {
		var recs []*kgo.Record
		for _, l := range lines[i:min(i+per, len(lines))] {
			k, v, _ := strings.Cut(l, "\t")
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			return err
		}
		time.Sleep(tick) // the pace of the input
	}
	return nil
}

// checkOnce checks that the records of topic, read_committed, are outputs
// of kind that replay makes, each once, and that they hold every such
// output that closed a minute or more before the input's last event (the
// service's watermark has not passed the rest: replay, at the end of its
// input, emits them too).
func checkOnce(t *testing.T, c testCluster, topic, rulesPath string, genArgs []string, kind string) {
	t.Helper()
	want, last := replayOutputs(t, rulesPath, genArgs, kind)
	got := make(map[string]int)
	for _, r := range c.consume(t, topic, readCommitted...) {
		got[r.value]++
	}
	bad := 0
	for v, n := range got {
		if n != 1 || want[v] == 0 {
			if bad++; bad <= 5 {
				t.Errorf("%s: %d times, %d in replay: %s", topic, n, want[v], v)
			}
		}
	}
	missing := 0
	for v := range want {
		var o struct{ End int64 }
		json.Unmarshal([]byte(v), &o)
		if got[v] == 0 && o.End <= last-time.Minute.Milliseconds() {
			if missing++; missing <= 5 {
				t.Errorf("%s: missing %s", topic, v)
			}
		}
	}
	if len(got) == 0 || bad > 0 || missing > 0 {
		t.Errorf("%s: %d records, %d wrong or repeated, %d missing", topic, len(got), bad, missing)
	}
	t.Logf("%s: %d records, each once", topic, len(got))
}

// replayOutputs returns the outputs of kind vigil replay makes of the
// workload (each with how many times), and the time of its last event.
func replayOutputs(t *testing.T, rulesPath string, genArgs []string, kind string) (map[string]int, int64) {
	t.Helper()
	dir := t.TempDir()
	events := filepath.Join(dir, "events.ndjson")
	if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--out", events}, genArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("vigil gen: %v\n%s", err, out)
	}
	out, err := exec.Command(vigilBinary(t), "replay", "--quiet", "--rules", rulesPath, "--events", events).Output()
	if err != nil {
		t.Fatalf("vigil replay: %v", err)
	}
	got := make(map[string]int)
	var last int64
	for l := range strings.Lines(string(out)) {
		l = strings.TrimSuffix(l, "\n")
		if strings.HasPrefix(l, `{"kind":"`+kind+`"`) {
			got[l]++
		}
	}
	evs, _ := os.ReadFile(events)
	for l := range strings.Lines(string(evs)) {
		var e struct{ TS int64 }
		if json.Unmarshal([]byte(l), &e) == nil {
			last = max(last, e.TS)
		}
	}
	return got, last
}

// testCluster is how the processes of a test reach a broker: vigil serve's
// flags, kcat's and a franz-go client's.
type testCluster struct {
	name  string
	serve []string
	kcat  []string
	opts  []kgo.Opt
}

// plainCluster is a vigil broker without security.
func plainCluster(t *testing.T) testCluster {
	_, line := startVigil(t, "listening on", "broker", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	addr := lastField(line)
	return testCluster{name: "plaintext", serve: []string{"--brokers", addr}, kcat: []string{"-b", addr},
		opts: []kgo.Opt{kgo.SeedBrokers(addr)}}
}

// tlsCluster is a vigil broker with SCRAM-SHA-512 over TLS and ACLs
// (startSecuredCluster), reached as the service's principal.
func tlsCluster(t *testing.T) testCluster {
	c := startSecuredCluster(t)
	props := c.props["vigil"]
	settings, err := kconf.ReadProperties(props)
	if err != nil {
		t.Fatal(err)
	}
	var kc kconf.Config
	if err := kc.Set(settings...); err != nil {
		t.Fatal(err)
	}
	opts, err := kc.Opts()
	if err != nil {
		t.Fatal(err)
	}
	return testCluster{name: "SASL_SSL", serve: []string{"--kafka-properties", props}, kcat: []string{"-F", props}, opts: opts}
}

// consume reads a whole topic with kcat, with kcat's extra args.
func (c testCluster) consume(t *testing.T, topic string, extra ...string) []kafkaRecord {
	t.Helper()
	return kcatConsume(t, c.kcat, topic, extra...)
}

// TestServeFencedZombie: an instance paused (SIGSTOP) in the middle of its
// work, under exactly-once, loses its tasks to another instance of the
// group; when it wakes up (SIGCONT) it cannot commit: the new owner took
// the tasks' transactional ids before it read their checkpoints. Its
// produce or commit is refused, and a read_committed consumer sees every
// decision exactly as replay makes it, once. On the embedded broker
// without security and with SASL (SCRAM-SHA-512) over TLS and ACLs.
func TestServeFencedZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	for _, start := range []func(*testing.T) testCluster{plainCluster, tlsCluster} {
		c := start(t)
		t.Run(c.name, func(t *testing.T) { testFencedZombie(t, c) })
	}
}

func testFencedZombie(t *testing.T, c testCluster) {
	dir := t.TempDir()
	genArgs := []string{"--events", "12000", "--users", "1000", "--seed", "12"}
	rulesPath, lines := eosWorkload(t, dir, genArgs)
	serve := func(name string) *proc {
		args := append([]string{"serve", "--rules", rulesPath, "--delivery", "exactly-once", "--checkpoints", "kafka",
			"--session-timeout", "6s", "--data-dir", filepath.Join(dir, name), "--instance-id", name}, c.serve...)
		p, _ := startVigil(t, "vigil serving", args...)
		return p
	}
	zombie := serve("zombie")
	produced := make(chan error, 1)
	go func() { produced <- produceSteadilyWith(c.opts, "transactions", lines, 15*time.Second) }()
	waitUntil(t, time.Minute, "a committed decision", func() bool {
		return len(c.consume(t, "vigil.decisions", readCommitted...)) > 0
	})
	if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	heir := serve("heir")
	// The heir owns every task once the paused instance's session is over.
	waitUntil(t, time.Minute, "the heir's four tasks", func() bool { return strings.Count(heir.logs(), "task started") >= 4 })
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the woken instance refused", func() bool {
		l := zombie.logs()
		return strings.Contains(l, "INVALID_PRODUCER_EPOCH") || strings.Contains(l, "PRODUCER_FENCED")
	})
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	recs := checkDecisionsOnce(t, c, rulesPath, genArgs)
	aborted := len(c.consume(t, "vigil.decisions", readUncommitted...)) - len(recs)
	t.Logf("%d aborted decision records", aborted)
}

// eosWorkload writes eosRules to dir and returns its path, with the
// workload of genArgs's transactions as "key<TAB>value" lines.
func eosWorkload(t *testing.T, dir string, genArgs []string) (rulesPath string, lines []string) {
	t.Helper()
	rulesPath = filepath.Join(dir, "eos.yaml")
	if err := os.WriteFile(rulesPath, []byte(eosRules), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tx.tsv")
	if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--kafka", "transactions", "--out", file}, genArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("vigil gen: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(file)
	return rulesPath, strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// checkDecisionsOnce waits until the decisions topic, read_committed,
// holds as many records as vigil replay makes decisions of the workload,
// and checks that they are replay's, byte for byte, each as many times as
// replay emits it (once, and again for each re-sent transaction). It
// returns the records read.
func checkDecisionsOnce(t *testing.T, c testCluster, rulesPath string, genArgs []string) []kafkaRecord {
	t.Helper()
	want, _ := replayOutputs(t, rulesPath, genArgs, "decision")
	total := 0
	for _, n := range want {
		total += n
	}
	var recs []kafkaRecord
	waitUntil(t, 3*time.Minute, "decision for every transaction", func() bool {
		recs = c.consume(t, "vigil.decisions", readCommitted...)
		return len(recs) >= total
	})
	got := make(map[string]int)
	for _, r := range recs {
		got[r.value]++
	}
	bad := 0
	for v, n := range got {
		if n != want[v] {
			if bad++; bad <= 5 {
				t.Errorf("decision %d times, %d in replay: %s", n, want[v], v)
			}
		}
	}
	if bad > 0 || len(recs) != total {
		t.Errorf("decisions: %d records read_committed, replay has %d; %d differ in content or count", len(recs), total, bad)
	}
	t.Logf("%d decision records read_committed (%d distinct)", len(recs), len(got))
	return recs
}

// waitUntil polls cond every 200 ms until it holds, failing the test after
// limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, limit)
		}
		time.Sleep(200 * time.Millisecond) // polling processes for their output
	}
}
