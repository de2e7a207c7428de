package main

import (
	"bufio"
	"bytes"
	"context"

	"github.com/vigil-cep/vigil/state"

	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/kafka"
)

// The tests here run the vigil binary as a process, next to kcat as an
// independent Kafka client: the service is exercised the way a user runs it.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary vigilBinary built, if it did.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// vigilBinary builds cmd/vigil once per test run; TestMain removes it.
func vigilBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vigil-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "vigil")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func needKcat(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed: ./scripts/test installs it (apt-get install kafkacat)")
	}
}

// proc is a vigil process started by a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	mu     *sync.Mutex
}

// startVigil starts `vigil args...`, waits for the first stdout line that
// contains want and returns the process and that line. The process is
// killed at cleanup.
func startVigil(t *testing.T, want string, args ...string) (*proc, string) {
	t.Helper()
	if args[0] == "serve" && !slices.Contains(args, "--http") {
		args = append(args, "--http", "127.0.0.1:0") // tests run side by side
	}
	cmd := exec.Command(vigilBinary(t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: new(bytes.Buffer), mu: new(sync.Mutex)}
	cmd.Stderr = lockedWriter{p.mu, p.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("vigil %s exited before %q; stderr:\n%s", args[0], want, p.logs())
			}
			if strings.Contains(l, want) {
				go func() {
					for range lines {
					}
				}()
				return p, l
			}
		case <-timeout:
			t.Fatalf("vigil %s: no %q within 60s; stderr:\n%s", args[0], want, p.logs())
		}
	}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// lastField returns the last space-separated word of s.
func lastField(s string) string {
	f := strings.Fields(s)
	return f[len(f)-1]
}

// produceWorkload writes the `vigil gen` workload of genArgs to the three
// input topics with kcat, keyed by user (kcat's partitioner hashes the key
// the same way for every topic: co-partitioned).
func produceWorkload(t *testing.T, broker string, genArgs ...string) {
	t.Helper()
	dir := t.TempDir()
	for _, topic := range []string{"transactions", "logins", "devices"} {
		file := filepath.Join(dir, topic+".tsv")
		args := append([]string{"gen", "--kafka", topic, "--out", file}, genArgs...)
		if out, err := exec.Command(vigilBinary(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("vigil gen: %v\n%s", err, out)
		}
		out, err := exec.Command("kcat", "-P", "-b", broker, "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random", "-l", file).CombinedOutput()
		if err != nil {
			t.Fatalf("kcat -P %s: %v\n%s", topic, err, out)
		}
	}
}

// flushWatermarks moves the watermark of every input partition past the
// workload, as the end of a replay does: one record at the current time on
// each partition of each topic, for users of their own.
func flushWatermarks(t *testing.T, broker string) {
	t.Helper()
	now := time.Now().UnixMilli()
	for _, topic := range []string{"transactions", "logins", "devices"} {
		for p := range 4 {
			v := fmt.Sprintf(`{"tx_id":"flush-%s-%d","user_id":"flush-%d","amount":1,"ip":"0.0.0.0","status":"OK","event":"seen","ts":%d}`, topic, p, p, now)
			cmd := exec.Command("kcat", "-P", "-b", broker, "-t", topic, "-p", fmt.Sprint(p))
			cmd.Stdin = strings.NewReader(v + "\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kcat -P: %v\n%s", err, out)
			}
		}
	}
}

// kafkaRecord is one record read by kcat: key and value.
type kafkaRecord struct{ key, value string }

// consume reads a whole topic with kcat, with kcat's extra args.
func consume(t *testing.T, broker, topic string, extra ...string) []kafkaRecord {
	t.Helper()
	return kcatConsume(t, []string{"-b", broker}, topic, extra...)
}

// kcatConsume reads a whole topic with kcat, reaching the broker with conn
// (-b or -F), with kcat's extra args.
func kcatConsume(t *testing.T, conn []string, topic string, extra ...string) []kafkaRecord {
	t.Helper()
	args := append(append([]string{"-C"}, conn...), "-t", topic, "-e", "-q", "-f", "%k\t%s\n")
	out, err := exec.Command("kcat", append(args, extra...)...).Output()
	if err != nil {
		t.Fatalf("kcat -C %s: %v", topic, err)
	}
	var recs []kafkaRecord
	for l := range strings.Lines(string(out)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "\t")
		recs = append(recs, kafkaRecord{k, v})
	}
	return recs
}

// decision is what the comparisons read of a decision record.
type decision struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Rules  []struct {
		Rule string `json:"rule"`
	} `json:"rules"`
	Shadow []struct {
		Rule string `json:"rule"`
	} `json:"shadow"`
}

// firedRules returns the active and shadow rules a decision names, restricted
// to those in keep.
func (d decision) firedRules(keep []string) []string {
	var out []string
	for _, r := range append(d.Rules, d.Shadow...) {
		if keep == nil || slices.Contains(keep, r.Rule) {
			out = append(out, r.Rule)
		}
	}
	slices.Sort(out)
	return out
}

// replayDecisions runs `vigil replay` with the example ruleset on the same
// workload: decision bytes by id.
func replayDecisions(t *testing.T, genArgs ...string) map[string]string {
	t.Helper()
	return replayDecisionsWith(t, "../../examples/fraud.yaml", genArgs...)
}

func replayDecisionsWith(t *testing.T, rulesPath string, genArgs ...string) map[string]string {
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
	got := make(map[string]string)
	for l := range strings.Lines(string(out)) {
		if !strings.HasPrefix(l, `{"kind":"decision"`) {
			continue
		}
		var d decision
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatal(err)
		}
		got[d.ID] = strings.TrimSuffix(l, "\n")
	}
	return got
}

// waitDecisions reads the decisions topic until every id of want has a
// decision, and returns every record read (duplicates included).
func waitDecisions(t *testing.T, broker string, want map[string]string, p *proc, kcatArgs ...string) []kafkaRecord {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		recs := consume(t, broker, "vigil.decisions", kcatArgs...)
		seen := make(map[string]bool, len(recs))
		for _, r := range recs {
			seen[r.key] = true
		}
		missing := 0
		for id := range want {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d transactions have no decision after 3 minutes; vigil's log:\n%s", missing, len(want), p.logs())
		}
		time.Sleep(500 * time.Millisecond) // polling a running service for its output
	}
}

// orderIndependent are the example ruleset's rules that read only the
// transactions stream: their outcome cannot depend on how the topics'
// arrivals interleave (ato_spend and takeover_spend read logins and devices).
var orderIndependent = []string{"many_ips", "card_testing", "large_amount"}

// checkDecisions compares the decisions read from Kafka with replay's: every
// id decided, every duplicate byte-identical, and the order-independent
// rules firing exactly as in replay.
func checkDecisions(t *testing.T, recs []kafkaRecord, want map[string]string) {
	t.Helper()
	checkDecisionsWith(t, recs, want, orderIndependent)
}

// checkDecisionsWith compares the rules of keep, or whole decisions when
// keep is nil, for the ids of want (other ids are ignored).
func checkDecisionsWith(t *testing.T, recs []kafkaRecord, want map[string]string, keep []string) {
	t.Helper()
	first := make(map[string]string)
	dups := 0
	for _, r := range recs {
		if _, ok := want[r.key]; !ok {
			continue
		}
		if prev, ok := first[r.key]; ok {
			dups++
			if prev != r.value {
				t.Errorf("id %s decided twice differently:\n%s\n%s", r.key, prev, r.value)
			}
			continue
		}
		first[r.key] = r.value
	}
	if len(first) != len(want) {
		t.Errorf("%d ids decided over Kafka, %d by replay", len(first), len(want))
	}
	differ, fired := 0, 0
	for id, w := range want {
		var a, b decision
		json.Unmarshal([]byte(w), &a)
		json.Unmarshal([]byte(first[id]), &b)
		same := slices.Equal(a.firedRules(keep), b.firedRules(keep))
		if keep == nil {
			same = w == first[id]
		}
		if len(a.Rules)+len(a.Shadow) > 0 {
			fired++
		}
		if !same {
			if differ++; differ <= 5 {
				t.Errorf("id %s:\nreplay: %s\nkafka:  %s", id, w, first[id])
			}
		}
	}
	if fired == 0 {
		t.Error("no rule fired in replay: the comparison shows nothing")
	}
	if differ > 0 {
		t.Errorf("%d of %d decisions differ from replay on the order-independent rules", differ, len(want))
	}
	t.Logf("%d records on %s, %d ids, %d duplicates (identical)", len(recs), "vigil.decisions", len(first), dups)
}

// TestServeEndToEnd: `vigil serve` with its embedded broker on a free port;
// kcat produces the `vigil gen` workload and reads vigil.decisions; the
// decisions agree with `vigil replay` on the same input.
func TestServeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	genArgs := []string{"--events", "30000", "--users", "2000", "--seed", "7"}
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--checkpoint-interval", "1s")
	broker := strings.Fields(line)[5] // vigil serving ruleset V on ADDR (...)
	produceWorkload(t, broker, genArgs...)
	want := replayDecisions(t, genArgs...)
	recs := waitDecisions(t, broker, want, p)
	checkDecisions(t, recs, want)

	// decide: watermark: decisions are a function of the input, whatever the
	// arrival order across topics, so every rule must agree with replay.
	fraud, err := os.ReadFile("../../examples/fraud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wmRules := filepath.Join(t.TempDir(), "fraud-watermark.yaml")
	os.WriteFile(wmRules, []byte(strings.Replace(string(fraud), "decide: true", "decide: watermark", 1)), 0o644)
	p2, line2 := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--rules", wmRules,
		"--data-dir", t.TempDir(), "--checkpoint-interval", "1s")
	broker2 := strings.Fields(line2)[5]
	produceWorkload(t, broker2, genArgs...)
	flushWatermarks(t, broker2)
	wantAll := replayDecisionsWith(t, wmRules, genArgs...)
	checkDecisionsWith(t, waitDecisions(t, broker2, wantAll, p2), wantAll, nil)

	// SIGTERM: drain, final checkpoint, exit 0.
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, p.logs())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("no exit within 30s of SIGTERM")
	}

}

// velocityRules decides every transaction and writes the velocity features
// into the reason: a transaction counted twice in the state after a crash
// shows as a different reason than replay's.
const velocityRules = `
streams:
  transactions: {topic: transactions, key: user_id, time: ts, id: tx_id, decide: true,
                 watermark: {max_out_of_order: 5s}}
rules:
  velocity:
    stream: transactions
    action: review
    score: 1
    when: 'true'
    reason: '"n=" + string(len(history("transactions", "1h"))) + " sum=" + string(sum(map(history("transactions", "1h"), .amount))) + " ips=" + string(len(uniq(map(history("transactions", "10m"), .ip))))'
limits: {cost: 200000} # the reason reads the history three times
`

// TestServeCrashRecovery: `vigil broker` runs as its own process; `vigil
// serve` is killed with SIGKILL at random moments while it processes, 20
// times, and restarted each time; it checkpoints every 200 ms, mostly deltas
// cut and written while it processes, with a new base every third (so kills
// land while a cut is encoded, while a delta or a base is written, and
// while a chain is merged); the newest checkpoint of a task is torn before
// the last start. At the end every transaction has a decision, duplicates are
// byte-identical, and every decision equals the uninterrupted replay's: the
// velocity features in the reasons show no event was counted twice.
func TestServeCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "velocity.yaml")
	if err := os.WriteFile(rulesPath, []byte(velocityRules), 0o644); err != nil {
		t.Fatal(err)
	}
	_, line := startVigil(t, "listening on", "broker", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "broker"))
	broker := lastField(line)

	// The workload, in chunks produced between the crashes.
	const chunks = 20
	genArgs := []string{"--events", "24000", "--users", "1500", "--seed", "11"}
	file := filepath.Join(dir, "tx.tsv")
	if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--kafka", "transactions", "--out", file}, genArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("vigil gen: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(file)
	lines := strings.SplitAfter(string(data), "\n")
	serveArgs := []string{"serve", "--brokers", broker, "--rules", rulesPath, "--data-dir", filepath.Join(dir, "state"),
		"--checkpoint-interval", "200ms", "--checkpoint-base-every", "3", "--checkpoints", "dir"}
	rng := time.Now().UnixNano()
	t.Logf("kill delays seeded with %d", rng)
	for i := range chunks {
		part := strings.Join(lines[i*len(lines)/chunks:(i+1)*len(lines)/chunks], "")
		chunk := filepath.Join(dir, fmt.Sprintf("chunk%d.tsv", i))
		os.WriteFile(chunk, []byte(part), 0o644)
		if out, err := exec.Command("kcat", "-P", "-b", broker, "-t", "transactions", "-K", "\t", "-l", chunk).CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
		p, _ := startVigil(t, "vigil serving", serveArgs...)
		rng = rng*6364136223846793005 + 1442695040888963407
		delay := 200*time.Millisecond + time.Duration(uint64(rng)>>33%1500)*time.Millisecond
		time.Sleep(delay) // a random moment to crash at
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}

	// Tear the newest checkpoint of a task, a delta where a task's newest
	// is one: the next start must fall back to the chain before it.
	var newest string
	deltas := 0
	for task := range 4 {
		ckpts, _ := filepath.Glob(filepath.Join(dir, "state", "checkpoints", fmt.Sprintf("task-%d-*.ckpt", task)))
		slices.Sort(ckpts)
		for i, f := range ckpts {
			b, _ := os.ReadFile(f)
			s, err := state.Decode(b)
			if err != nil || s.Parent == 0 {
				continue
			}
			deltas++
			if i == len(ckpts)-1 && newest == "" {
				newest = f
			}
		}
		if task == 3 && newest == "" && len(ckpts) > 1 {
			newest = ckpts[len(ckpts)-1] // every task's newest is a base: tear a base
		}
	}
	if deltas == 0 || newest == "" {
		t.Fatalf("after the crashes: %d deltas, newest to tear %q", deltas, newest)
	}
	t.Logf("tearing %s (%d deltas on disk)", filepath.Base(newest), deltas)
	st, _ := os.Stat(newest)
	if err := os.Truncate(newest, st.Size()/2); err != nil {
		t.Fatal(err)
	}

	p, _ := startVigil(t, "vigil serving", serveArgs...)
	want := replayDecisionsWith(t, rulesPath, genArgs...)
	recs := waitDecisions(t, broker, want, p)
	if !strings.Contains(p.logs(), "corrupt checkpoint skipped") {
		t.Errorf("the torn checkpoint %s was not reported; log:\n%s", newest, p.logs())
	}
	first := make(map[string]string)
	dups := 0
	for _, r := range recs {
		if prev, ok := first[r.key]; ok {
			dups++
			if prev != r.value {
				t.Errorf("id %s: a re-emitted decision differs:\n%s\n%s", r.key, prev, r.value)
			}
			continue
		}
		first[r.key] = r.value
	}
	differ := 0
	for id, w := range want {
		if first[id] != w {
			if differ++; differ <= 5 {
				t.Errorf("id %s:\nreplay: %s\nkafka:  %s", id, w, first[id])
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d decisions differ from the uninterrupted replay", differ, len(want))
	}
	t.Logf("%d decisions, %d ids, %d re-emitted duplicates", len(recs), len(first), dups)
}

// simpleRules decides transactions with no history, so that the memory a
// throttled service holds is its queues and buffers, not its state.
const simpleRules = `
streams:
  transactions: {topic: transactions, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  big: {stream: transactions, action: review, when: 'amount >= 1000'}
`

// TestServeSlowOutput: the broker delays every produce response to the
// output topics for a while (kfake's control hooks). Vigil must stop taking
// input once its buffers are full — its RSS stays flat while the input
// backlog is much larger — and, once the outputs flow again, decide every
// transaction: nothing is dropped to make room.
func TestServeSlowOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	dir := t.TempDir()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Create the output topics first, so that the throttle can tell their
	// produce requests by topic ID (newer Produce versions carry no names).
	c := b.Cluster()
	outputs := make(map[[16]byte]bool)
	for _, topic := range []string{"vigil.decisions", "vigil.alerts", "vigil.joins", "vigil.windows", "vigil.late", "vigil.dlq"} {
		if err := c.CreateTopic(topic, 4, nil); err != nil {
			t.Fatal(err)
		}
		outputs[c.TopicInfo(topic).TopicID] = true
	}
	var throttled atomic.Bool
	throttled.Store(true)
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !throttled.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if outputs[tp.TopicID] || strings.HasPrefix(tp.Topic, "vigil.") && tp.Topic != "vigil.rules" {
				c.SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})

	rulesPath := filepath.Join(dir, "simple.yaml")
	os.WriteFile(rulesPath, []byte(simpleRules), 0o644)
	file := filepath.Join(dir, "tx.tsv")
	genArgs := []string{"--events", "400000", "--users", "20000", "--seed", "5", "--duplicates", "0"}
	if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--kafka", "transactions", "--out", file}, genArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("vigil gen: %v\n%s", err, out)
	}
	if out, err := exec.Command("kcat", "-P", "-b", b.Addr(), "-t", "transactions", "-K", "\t", "-l", file).CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	ids := make(map[string]bool)
	data, _ := os.ReadFile(file)
	for l := range strings.Lines(string(data)) {
		var v struct {
			ID string `json:"tx_id"`
		}
		_, val, _ := strings.Cut(l, "\t")
		json.Unmarshal([]byte(val), &v)
		ids[v.ID] = true
	}

	p, _ := startVigil(t, "vigil serving", "serve", "--brokers", b.Addr(), "--rules", rulesPath,
		"--data-dir", filepath.Join(dir, "state"), "--max-buffered-records", "10000")
	var samples []int64
	for range 40 {
		time.Sleep(250 * time.Millisecond) // sampling memory while the outputs are stalled
		samples = append(samples, rssKiB(t, p.cmd.Process.Pid))
	}
	if n := len(consume(t, b.Addr(), "vigil.decisions")); n > 0 {
		t.Fatalf("%d decisions were written while the outputs were stalled: the throttle does not hold", n)
	}
	throttled.Store(false)
	close(release)
	early, late := slices.Max(samples[:len(samples)/2]), slices.Max(samples[len(samples)/2:])
	t.Logf("RSS while outputs stalled (KiB, every 250 ms): %v", samples)
	if late > early+early/5 {
		t.Errorf("RSS kept growing while outputs were stalled: %d KiB in the first 5 s, %d KiB in the next 5 s", early, late)
	}
	// Holding the whole backlog (280k records, decoded) would take far more.
	if late > 256<<10 {
		t.Errorf("RSS %d KiB while stalled: the input was not held back", late)
	}

	want := make(map[string]string, len(ids))
	for id := range ids {
		want[id] = ""
	}
	recs := waitDecisions(t, b.Addr(), want, p)
	t.Logf("%d decisions for %d transactions after the outputs recovered", len(recs), len(ids))
}

// rssKiB reads a process's resident set size from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kib int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kib)
			return kib
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestRulesPush: `vigil rules push` publishes a valid document and refuses
// an invalid one with its errors and positions, publishing nothing.
func TestRulesPush(t *testing.T) {
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	code, _, stderr := runCLI(t, "rules", "push", "--brokers", b.Addr(), "../../rules/testdata/three_mistakes.yaml")
	if code != 1 || !strings.Contains(stderr, "three_mistakes.yaml:10:13: rules.big.stream: unknown stream") {
		t.Errorf("invalid document: exit %d, %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "rules", "push", "--brokers", b.Addr(), "../../examples/fraud.yaml")
	if code != 0 || !strings.Contains(out, "published ruleset version") {
		t.Fatalf("valid document: exit %d, %s %s", code, out, stderr)
	}
	offsets, err := exec.Command("kcat", "-C", "-b", b.Addr(), "-t", "vigil.rules", "-e", "-q", "-f", "%o\n").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(offsets), "\n"); n != 1 {
		t.Errorf("vigil.rules holds %d records, want 1 (the invalid document must not be published)", n)
	}
}

// TestServeTwoInstances: two `vigil serve` processes in one group split the
// partitions; one is stopped while they work, and the other takes its
// partitions over, restoring their state from the checkpoints topic. Every
// decision equals the uninterrupted replay's, byte for byte.
func TestServeTwoInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "velocity.yaml")
	os.WriteFile(rulesPath, []byte(velocityRules), 0o644)
	_, line := startVigil(t, "listening on", "broker", "--listen", "127.0.0.1:0", "--data-dir", "")
	broker := lastField(line)
	genArgs := []string{"--events", "60000", "--users", "3000", "--seed", "13"}
	file := filepath.Join(dir, "tx.tsv")
	if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--kafka", "transactions", "--out", file}, genArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("vigil gen: %v\n%s", err, out)
	}
	args := func(name string) []string {
		return []string{"serve", "--brokers", broker, "--rules", rulesPath, "--data-dir", filepath.Join(dir, name),
			"--checkpoint-interval", "200ms", "--session-timeout", "6s"}
	}
	a, _ := startVigil(t, "vigil serving", args("a")...)
	b, _ := startVigil(t, "vigil serving", args("b")...)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(b.logs(), "task started"); {
		if time.Now().After(deadline) {
			t.Fatalf("instance b got no partition within 60s:\n%s\n%s", a.logs(), b.logs())
		}
		time.Sleep(100 * time.Millisecond) // polling the group's rebalance
	}
	if out, err := exec.Command("kcat", "-P", "-b", broker, "-t", "transactions", "-K", "\t", "-l", file).CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	time.Sleep(time.Second) // both at work
	b.cmd.Process.Signal(os.Interrupt)
	b.cmd.Wait()

	want := replayDecisionsWith(t, rulesPath, genArgs...)
	recs := waitDecisions(t, broker, want, a)
	checkDecisionsWith(t, recs, want, nil)
	if !strings.Contains(b.logs(), "task started") {
		t.Errorf("instance b never ran a task:\n%s", b.logs())
	}
	if !strings.Contains(a.logs(), "restored=true") {
		t.Errorf("instance a never restored a task from the checkpoints topic:\n%s", a.logs())
	}
}

// TestServeRedisEnrichment: vigil serve enriches transactions from a real
// Redis before the rules read them.
func TestServeRedisEnrichment(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	addr := startRedis(t)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	if err := client.HSet(context.Background(), "profile:u1", "risk", "HIGH").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
enrichments:
  profile: {stream: tx, redis: {hash: '"profile:" + user_id'}, timeout: 500ms, fallback: {risk: UNKNOWN}}
rules:
  risky: {stream: tx, action: block, score: 50, when: 'profile.risk == "HIGH"'}
`), 0o644)
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--rules", rulesPath,
		"--data-dir", filepath.Join(dir, "state"), "--redis", addr)
	broker := strings.Fields(line)[5]
	cmd := exec.Command("kcat", "-P", "-b", broker, "-t", "tx", "-K", "\t")
	cmd.Stdin = strings.NewReader("u1\t{\"tx_id\":\"a\",\"user_id\":\"u1\",\"ts\":1}\nu2\t{\"tx_id\":\"b\",\"user_id\":\"u2\",\"ts\":2}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	recs := waitDecisions(t, broker, map[string]string{"a": "", "b": ""}, p)
	for _, r := range recs {
		want := map[string]string{"a": `"action":"block"`, "b": `"action":"allow"`}[r.key]
		if !strings.Contains(r.value, want) {
			t.Errorf("decision %s: %s, want %s", r.key, r.value, want)
		}
	}
}
