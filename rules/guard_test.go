package rules

import (
	"errors"
	"testing"
)

// TestGuardStops stops a rule evaluation from inside it, as a watchdog on
// another goroutine would: the evaluation fails at its next field read with
// ErrStopped naming the rule, and the next evaluation runs as usual.
func TestGuardStops(t *testing.T) {
	rs, err := Load([]byte("streams:\n  tx: {key: u, time: ts, id: id, decide: true, max_history: 100}\n" +
		"rules:\n  slow: {stream: tx, action: block, when: 'any(history(\"tx\", \"1h\"), .s == s + \"!\")'}\n" +
		"  cheap: {stream: tx, action: block, when: 's == \"x\"'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := &Guard{}
	g.Watch()
	var stopNext bool
	past := &hookedHistory{hook: func() {
		if stopNext {
			g.Stop(g.Running()) // the watchdog's view: this evaluation runs too long
		}
	}}
	past.Add(map[string]any{"s": "a"}, Mark{}, nil)
	past.Add(map[string]any{"s": "b"}, Mark{}, nil)
	ev, err := rs.NewEvaluator(past)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetGuard(g)
	slow, cheap := 1, 0 // rules are ordered by name
	if rs.Rules[slow].Name != "slow" {
		t.Fatalf("rule order: %s", rs.Rules[slow].Name)
	}
	fields := MapFields(map[string]any{"s": "a"})
	if ok, err := ev.When(slow, fields); ok || err != nil {
		t.Fatalf("unstopped: got %v, %v", ok, err)
	}
	stopNext = true
	_, err = ev.When(slow, fields)
	if !errors.Is(err, ErrStopped) || err.Error() != "rule slow: stopped: the evaluation ran longer than the rule time limit" {
		t.Fatalf("stopped: got %v", err)
	}
	if m := g.Running(); m.Rule() != slow {
		t.Errorf("Running names rule %d, want %d", m.Rule(), slow)
	}
	stopNext = false
	if ok, err := ev.When(cheap, MapFields(map[string]any{"s": "x"})); !ok || err != nil {
		t.Fatalf("the next evaluation: got %v, %v", ok, err)
	}
	ev.Idle()
	if g.Running() != 0 {
		t.Error("Idle left a running mark")
	}
	g.StopAll()
	if _, err := ev.When(cheap, MapFields(map[string]any{"s": "x"})); !errors.Is(err, ErrStopped) {
		t.Fatalf("after StopAll: got %v", err)
	}
}

// hookedHistory is a Recorded history that calls hook on every read.
type hookedHistory struct {
	Recorded
	hook func()
}

func (h *hookedHistory) Past(s int, w int64) []Past {
	h.hook()
	return h.Recorded.Past(s, w)
}

func (h *hookedHistory) Values(s int, w int64) []any {
	h.hook()
	return h.Recorded.Values(s, w)
}

func (h *hookedHistory) Failure(s int, w int64, i, k int) string {
	h.hook()
	return h.Recorded.Failure(s, w, i, k)
}
