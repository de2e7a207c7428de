package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/service"

	"github.com/vigil-cep/vigil/rules"
)

const conflictRules = `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true, max_future_skew: 0s}
rules:
  second: {stream: tx, action: block, score: 10, when: 'len(history("tx", "1h")) >= 2'}
`

// outputTask is a task with its outputs collected, one string each.
type outputTask struct {
	*Task
	out []string
}

func newOutputTask(t *testing.T, rs *rules.Ruleset, opts ...Option) *outputTask {
	t.Helper()
	ot := &outputTask{}
	task, err := NewTask(rs, func(o Output) { ot.out = append(ot.out, o.Kind.String()+" "+string(o.Value)) }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ot.Task = task
	return ot
}

// tx processes a transaction and returns its outputs and the record's Err.
func (ot *outputTask) tx(id, user string, ts int64) ([]string, error) {
	ot.out = nil
	rec := Record{Stream: 0, StreamName: "tx", Offset: ts,
		Value: fmt.Sprintf(`{"tx_id":%q,"user_id":%q,"ts":%d}`, id, user, ts)}
	ot.Process([]*Record{&rec})
	return ot.out, rec.Err
}

// decide is tx through Decide (the decision API).
func (ot *outputTask) decide(id, user string, ts int64) (*Decided, error) {
	ot.out = nil
	rec := Record{Stream: 0, StreamName: "tx", Offset: -1,
		Value: fmt.Sprintf(`{"tx_id":%q,"user_id":%q,"ts":%d}`, id, user, ts)}
	return ot.Decide(&rec)
}

func mustLoad(t testing.TB, doc string) *rules.Ruleset {
	t.Helper()
	rs, err := rules.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// wantOne checks that outs is one output of kind kind that contains want.
func wantOne(t *testing.T, what string, outs []string, kind, want string) {
	t.Helper()
	if len(outs) != 1 || !strings.HasPrefix(outs[0], kind+" ") || !strings.Contains(outs[0], want) {
		t.Fatalf("%s: outputs %q, want one %s with %s", what, outs, kind, want)
	}
}

// TestIDConflictSameTask: an id seen again with another key, on the same
// task, goes to the DLQ and counts nowhere; with the same key it is a
// duplicate, which gets the stored decision again.
func TestIDConflictSameTask(t *testing.T) {
	task := newOutputTask(t, mustLoad(t, conflictRules))
	outs, _ := task.tx("t1", "u1", 1000)
	wantOne(t, "first", outs, "decision", `"id":"t1","stream":"tx","key":"u1"`)
	first := outs[0]

	outs, err := task.tx("t1", "u2", 2000)
	const reason = `id \"t1\" was already seen with another key within its retention (key \"u1\", this event's key \"u2\"): refused, not decided again`
	wantOne(t, "same id, other key", outs, "dlq", `"error":"`+reason+`"`)
	var ce *IDConflictError
	if !errors.As(err, &ce) || ce.HeldBy != "u1" || ce.Key != "u2" {
		t.Fatalf("rec.Err = %v, want the IDConflictError", err)
	}
	if task.keys.get("u2", keyHash("u2")) != nil {
		t.Error("the refused event made a state for its key")
	}
	if err := task.idConflict(0, "t1", "u2"); err == nil {
		t.Error("IDConflict(t1, u2) = nil")
	}
	if err := task.idConflict(0, "t1", "u1"); err != nil {
		t.Errorf("IDConflict(t1, u1) = %v", err)
	}

	outs, _ = task.tx("t1", "u1", 1000)
	if len(outs) != 1 || outs[0] != first {
		t.Fatalf("same id, same key: %q, want the stored decision %q", outs, first)
	}
	// u2's refused event is not in its history: its next one is its first.
	outs, _ = task.tx("t2", "u2", 3000)
	wantOne(t, "u2's next", outs, "decision", `"action":"allow"`)
	if s := task.Stats(); s.Records != 4 || s.DLQ != 1 || s.Duplicates != 1 || s.Decisions != 3 {
		t.Errorf("stats %+v", s)
	}
}

// TestIDIndexAcrossTasks: tasks sharing an IDIndex refuse an id that
// another task holds, whatever the key; the id is free again once it
// expires from the task that holds it; Close releases what a task holds; a
// task that takes over a snapshot of its partition takes over its entries.
func TestIDIndexAcrossTasks(t *testing.T) {
	rs := mustLoad(t, conflictRules)
	ix := NewIDIndex()
	a := newOutputTask(t, rs, SharedIDs(ix, 0))
	b := newOutputTask(t, rs, SharedIDs(ix, 1))

	outs, _ := a.tx("t1", "u1", 1000)
	wantOne(t, "a: t1 u1", outs, "decision", `"key":"u1"`)
	outs, err := b.tx("t1", "u2", 1000)
	wantOne(t, "b: t1 u2", outs, "dlq", `"error":"id \"t1\" was already seen on partition 0 within its retention: refused, not decided again"`)
	if !errors.As(err, new(*IDConflictError)) {
		t.Fatalf("rec.Err = %v", err)
	}
	outs, _ = b.tx("t1", "u1", 1000)
	wantOne(t, "b: t1 u1", outs, "dlq", `id \"t1\" was already seen on partition 0 within its retention`)
	if err := b.idConflict(0, "t1", "u2"); err == nil {
		t.Error("b.IDConflict(t1, u2) = nil")
	}
	if err := b.idConflict(0, "t9", "u2"); err != nil {
		t.Errorf("b.IDConflict(t9, u2) = %v", err)
	}
	if n := ix.Len(); n != 1 {
		t.Fatalf("index holds %d ids, want 1", n)
	}

	// a's watermark passes t1's retention (1h): a forgets t1, and so does
	// the index.
	outs, _ = a.tx("t2", "u1", 1000+3_600_000+2)
	wantOne(t, "a: t2 later", outs, "decision", `"id":"t2"`)
	if n := ix.Len(); n != 1 {
		t.Fatalf("index holds %d ids after t1 expired, want 1 (t2)", n)
	}
	outs, _ = b.tx("t1", "u2", 3_700_000)
	wantOne(t, "b: t1 u2 after t1 expired", outs, "decision", `"id":"t1","stream":"tx","key":"u2"`)

	// A task of the next version takes a's state over: the entries it
	// holds move to it, and closing a releases nothing of them.
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	a2 := newOutputTask(t, rs, SharedIDs(ix, 0))
	if err := a2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n := ix.Len(); n != 2 {
		t.Fatalf("index holds %d ids after the takeover, want 2", n)
	}
	outs, _ = b.tx("t2", "u7", 3_700_000)
	wantOne(t, "b: t2 u7, t2 held by a2", outs, "dlq", `id \"t2\" was already seen on partition 0`)
	a2.Close()
	b.Close()
	if n := ix.Len(); n != 0 {
		t.Fatalf("index holds %d ids after every task closed, want 0", n)
	}

	// A restore whose id another partition holds already keeps both: the
	// other holder's entry stays, and the restored task keeps its decision.
	c := newOutputTask(t, rs, SharedIDs(ix, 1))
	c.tx("t2", "u9", 3_700_000)
	a3 := newOutputTask(t, rs, SharedIDs(ix, 0))
	if err := a3.Restore(snap); err != nil {
		t.Fatal(err)
	}
	outs, _ = a3.tx("t2", "u1", 1000+3_600_000+2)
	wantOne(t, "a3: t2 u1 again", outs, "decision", `"id":"t2","stream":"tx","key":"u1"`)
	a3.Close()
	d := newOutputTask(t, rs, SharedIDs(ix, 0))
	if err := d.idConflict(0, "t2", "u1"); err == nil {
		t.Error("c's entry went with a3's Close")
	}
}

// TestFeaturesKept: the features of a decision the API made (Decide) are
// kept with its id, the same bytes after a snapshot and restore, and go
// when the id does.
func TestFeaturesKept(t *testing.T) {
	rs := mustLoad(t, conflictRules)
	task := newOutputTask(t, rs)
	task.tx("t1", "u1", 1000)
	d, err := task.decide("t2", "u1", 2000) // "second" matches
	if err != nil {
		t.Fatal(err)
	}
	got := d.Features
	if string(got) != `{"second":{"len(history(\"tx\", \"1h\"))":2}}` {
		t.Fatalf("Decide(t2).Features = %s", got)
	}
	if _, f, ok := task.Decision("t1"); !ok || f != nil {
		t.Errorf("Decision(t1), decided from its input: ok %v, features %s", ok, f)
	}
	snap, err := task.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	again := newOutputTask(t, rs)
	if err := again.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if _, f, _ := again.Decision("t2"); string(f) != string(got) {
		t.Errorf("after a restore: %s, want %s", f, got)
	}
	again.tx("t3", "u9", 2000+3_600_000+2) // t2's retention passes
	if _, _, ok := again.Decision("t2"); ok {
		t.Error("the decision of an expired id is still held")
	}
	// A decision with no rule matched keeps no features: the snapshot is
	// what processing the event from its input would have made.
	plain, viaAPI := newOutputTask(t, rs), newOutputTask(t, rs)
	plain.tx("t1", "u1", 1000)
	if d, err := viaAPI.decide("t1", "u1", 1000); err != nil || d.Features != nil {
		t.Fatalf("Decide(t1) = features %s, %v", d.Features, err)
	}
	s1, _ := plain.Snapshot()
	s2, _ := viaAPI.Snapshot()
	if string(s1) != string(s2) {
		t.Error("a Decide that recorded no features changed the snapshot")
	}
}

// TestDecide: Decide returns the decision of its event without emitting
// it; a repeat gets the stored decision; another body, another key, or an
// unreadable event are the service's errors.
func TestDecide(t *testing.T) {
	rs := mustLoad(t, conflictRules)
	task := newOutputTask(t, rs)
	d, err := task.decide("t1", "u1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if d.Replay || d.Output.Kind != KindDecision || d.Output.Key != "t1" || !strings.Contains(string(d.Output.Value), `"id":"t1"`) {
		t.Fatalf("Decide(t1) = %+v", d)
	}
	if len(task.out) != 0 {
		t.Errorf("Decide emitted %q; its decision is the caller's to write", task.out)
	}
	again, err := task.decide("t1", "u1", 1000)
	if err != nil || !again.Replay || string(again.Output.Value) != string(d.Output.Value) {
		t.Fatalf("repeat: %+v, %v", again, err)
	}
	for _, c := range []struct {
		name string
		rec  Record
		want error
	}{
		{"other body", Record{Value: `{"tx_id":"t1","user_id":"u1","ts":1001}`}, service.ErrIDConflict},
		{"other key", Record{Value: `{"tx_id":"t1","user_id":"u2","ts":1000}`}, service.ErrIDConflict},
		{"not JSON", Record{Value: `{`}, service.ErrBadEvent},
		{"no id", Record{Value: `{"user_id":"u1","ts":1000}`}, service.ErrBadEvent},
	} {
		c.rec.StreamName, c.rec.Offset = "tx", -1
		if _, err := task.Decide(&c.rec); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// BenchmarkProcessIDIndex is BenchmarkProcess with the task's ids in an
// IDIndex, as the service runs its tasks: the cost of the index on the path
// of every event (compare the two with benchstat).
func BenchmarkProcessIDIndex(b *testing.B) {
	rs, recs := processBenchInput(b)
	b.ReportAllocs()
	for b.Loop() {
		ix := NewIDIndex()
		task, err := NewTask(rs, func(Output) {}, SharedIDs(ix, 0))
		if err != nil {
			b.Fatal(err)
		}
		for i := range recs {
			rec := recs[i]
			task.process(&rec)
		}
		task.Finish()
		task.Close()
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
