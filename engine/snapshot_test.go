package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/service"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
)

// runner feeds replay lines to one Task, as a Kafka task gets its records,
// and collects the outputs.
type runner struct {
	rs    *rules.Ruleset
	task  *Task
	names map[string]int
	out   bytes.Buffer
}

func newRunner(t testing.TB, rs *rules.Ruleset) *runner {
	r := &runner{rs: rs, names: streamNames(rs)}
	task, err := NewTask(rs, func(o Output) {
		r.out.Write(o.Value)
		r.out.WriteByte('\n')
	})
	if err != nil {
		t.Fatal(err)
	}
	r.task = task
	return r
}

func (r *runner) feed(lines []string, first int) {
	for i, l := range lines {
		rec := testLine(l, int64(first+i+1), r.names)
		r.task.Process([]*Record{&rec})
	}
}

// TestSnapshotRestore: a task restored from a snapshot taken after any
// prefix of the input continues exactly as the original does: same outputs
// byte for byte, and its own snapshot is the same bytes. It runs every golden
// case (windows, lateness, patterns, joins, idempotency, DLQ) cut at every
// line, and the `vigil gen` workload with the example ruleset cut at a few.
func TestSnapshotRestore(t *testing.T) {
	dirs, _ := filepath.Glob("../replay/testdata/replay/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases in ../replay/testdata/replay")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			rs := loadRuleset(t, filepath.Join(dir, "rules.yaml"))
			lines := readLines(t, filepath.Join(dir, "events.ndjson"))
			for cut := 0; cut <= len(lines); cut++ {
				checkRestore(t, rs, lines, cut)
			}
		})
	}
	t.Run("gen", func(t *testing.T) {
		rs := loadRuleset(t, "../examples/fraud.yaml")
		var buf bytes.Buffer
		if _, err := workload.Generate(&buf, workload.Config{Users: 300, Events: 20000, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		for _, cut := range []int{1, 777, 5000, 12345, 19999} {
			checkRestore(t, rs, lines, cut)
		}
	})
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	var lines []string
	for l := range strings.Lines(string(mustRead(t, path))) {
		if l = strings.TrimSuffix(l, "\n"); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func checkRestore(t *testing.T, rs *rules.Ruleset, lines []string, cut int) {
	t.Helper()
	a := newRunner(t, rs)
	a.feed(lines[:cut], 0)
	snap, err := a.task.Snapshot()
	if err != nil {
		t.Fatalf("cut %d: snapshot: %v", cut, err)
	}
	b := newRunner(t, rs)
	if err := b.task.Restore(snap); err != nil {
		t.Fatalf("cut %d: restore: %v", cut, err)
	}
	again, err := b.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, again) {
		t.Fatalf("cut %d: the restored task's snapshot differs (%d vs %d bytes)", cut, len(snap), len(again))
	}
	a.out.Reset()
	a.feed(lines[cut:], cut)
	a.task.Finish()
	b.feed(lines[cut:], cut)
	b.task.Finish()
	if a.out.String() != b.out.String() {
		t.Fatalf("cut %d: outputs after the restore differ:\n%s", cut, firstDiff(a.out.String(), b.out.String()))
	}
	if sa, sb := a.task.Stats(), b.task.Stats(); sa != sb {
		t.Fatalf("cut %d: stats differ:\n%+v\n%+v", cut, sa, sb)
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\noriginal: %s\nrestored: %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("%d vs %d lines", len(la), len(lb))
}

// TestRecall: a decision read back from the decisions topic after a restore
// is emitted again, byte for byte, instead of a new one, and the event still
// counts in the state.
func TestRecall(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
rules:
  busy: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 2'}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, rs)
	recorded := `{"kind":"decision","id":"t1","stream":"tx","key":"u","time":1,"action":"block","score":99,"rules":[],"shadow":[],"errors":[]}`
	if !r.task.Recall([]byte(recorded)) {
		t.Fatal("Recall refused a decision record")
	}
	if r.task.Recall([]byte(`{"kind":"window"}`)) {
		t.Fatal("Recall took a window record")
	}
	// A checkpoint taken before the transaction comes again keeps it.
	snap, err := r.task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r = newRunner(t, rs)
	if err := r.task.Restore(snap); err != nil {
		t.Fatal(err)
	}
	r.feed([]string{
		`{"stream":"tx","value":{"tx_id":"t1","user_id":"u","ts":1}}`,
		`{"stream":"tx","value":{"tx_id":"t1","user_id":"u","ts":1}}`,
		`{"stream":"tx","value":{"tx_id":"t2","user_id":"u","ts":2}}`,
	}, 0)
	got := strings.Split(strings.TrimSuffix(r.out.String(), "\n"), "\n")
	if len(got) != 3 || got[0] != recorded || got[1] != recorded {
		t.Fatalf("the recorded decision was not re-emitted:\n%s", r.out.String())
	}
	if !strings.Contains(got[2], `"action":"review"`) {
		t.Errorf("t1 did not count in the state: %s", got[2])
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEntity: the entity view shows a key's recent history (newest first,
// paged), its live windows and partial matches, and its recent decisions.
func TestEntity(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
windows:
  spend: {stream: tx, tumbling: 1h, aggregate: {n: count(), total: sum(amount)}}
patterns:
  pair: {stream: tx, steps: [{name: a, where: amount > 100}, {name: b, where: amount > 100}]}
rules:
  busy: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 2'}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, rs)
	r.feed([]string{
		`{"stream":"tx","value":{"tx_id":"t1","user_id":"u","amount":500,"ts":1000}}`,
		`{"stream":"tx","value":{"tx_id":"t2","user_id":"u","amount":5,"ts":2000}}`,
		`{"stream":"tx","value":{"tx_id":"t3","user_id":"v","amount":5,"ts":3000}}`,
	}, 0)
	v := r.task.Entity("u", service.EntityQuery{Limit: 1})
	got, _ := json.Marshal(v)
	want := `{"key":"u","history":{"tx":[{"time":2000,"event":{}}]},` +
		`"windows":[{"window":"spend","start":0,"end":3600000,"values":{"n":2,"total":505},"fired":false}],` +
		`"partial_matches":{"pair":1},"recent_decisions":[` +
		`{"kind":"decision","id":"t2","stream":"tx","key":"u","time":2000,"action":"review","score":0,"rules":[{"rule":"busy","action":"review","score":0,"reason":""}],"shadow":[],"errors":[]},` +
		`{"kind":"decision","id":"t1","stream":"tx","key":"u","time":1000,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]}],` +
		`"watermark":2999,"lag_ms":0,"task":0,"instance":""}` // the runtime fills the last three
	if string(got) != want {
		t.Errorf("entity view:\n got %s\nwant %s", got, want)
	}
	if v := r.task.Entity("u", service.EntityQuery{Before: 2000}); len(v.History["tx"]) != 1 || !strings.Contains(string(v.History["tx"][0]), `"time":1000`) {
		t.Errorf("page before 2000: %s", v.History["tx"])
	}
	if d, _, _, ok := r.task.lookup(0, "t1"); !ok || !strings.Contains(string(d), `"id":"t1"`) {
		t.Errorf("Lookup(t1) = %s, %v", d, ok)
	}
}

// TestEntityHidesExpired: a key kept alive by one stream shows none of its
// events of another stream past that stream's retention, though it has not
// added an event there since to evict them.
func TestEntityHidesExpired(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
  logins: {key: user_id, time: ts}
rules:
  busy: {stream: tx, action: review, when: 'len(history("tx", "1h")) >= 2 || len(history("logins", "10m")) > 3'}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, rs)
	r.feed([]string{
		`{"stream":"logins","value":{"user_id":"u","ts":1000}}`,
		`{"stream":"tx","value":{"tx_id":"t1","user_id":"u","ts":2000}}`,
		`{"stream":"tx","value":{"tx_id":"t2","user_id":"u","ts":1200000}}`,
		`{"watermark":1300000}`,
	}, 0)
	v := r.task.Entity("u", service.EntityQuery{})
	if len(v.History["logins"]) != 0 || len(v.History["tx"]) != 2 {
		t.Errorf("history at watermark %d: %s", v.Watermark, v.History)
	}
}
