package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/rules"
)

// TestWatchdogStopsASlowRule runs the watchdog's rounds from inside a rule
// evaluation, at chosen times, as its goroutine would see it: the evaluation
// is stopped once it has run for the limit, Ready names the task and the rule,
// and the next round without it clears the report.
func TestWatchdogStopsASlowRule(t *testing.T) {
	rs, err := rules.Load([]byte("streams:\n  tx: {key: u, time: ts, id: id, decide: true, max_history: 10}\n" +
		"rules:\n  slow: {stream: tx, action: block, when: 'any(history(\"tx\", \"1h\"), .s == s)'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{RuleTimeLimit: time.Second}, tasks: map[int32]*task{}}
	s.joined.Store(true)
	tk := &task{part: 3}
	tk.guard.Watch()
	tk.running.Store(rs)
	s.tasks[3] = tk

	start := time.Unix(1_700_000_000, 0)
	seen := map[int32]sighting{}
	var reports []string
	ev, err := rs.NewEvaluator(&inspectingHistory{inspect: func() {
		for _, at := range []time.Duration{0, 999 * time.Millisecond, time.Second} {
			reports = append(reports, s.inspect(start.Add(at), seen))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ev.SetGuard(&tk.guard)
	_, err = ev.When(0, rules.MapFields(map[string]any{"s": "x"}))
	if !errors.Is(err, rules.ErrStopped) {
		t.Fatalf("the slow evaluation: got %v, want ErrStopped", err)
	}
	want := []string{"", "", "task 3 is stuck in rule slow: one evaluation has run for 1s (the limit is 1s)"}
	for i := range want {
		if reports[i] != want[i] {
			t.Errorf("round %d: got %q, want %q", i, reports[i], want[i])
		}
	}
	s.stuck.Store(&reports[2])
	if err := s.Ready(); err == nil || err.Error() != want[2] {
		t.Errorf("Ready: got %v", err)
	}
	ev.Idle()
	if r := s.inspect(start.Add(2*time.Second), seen); r != "" {
		t.Errorf("after the evaluation: got %q", r)
	}
}

// TestServiceCostBoundRecordLimit: the service loads rulesets for its own
// record limit, so that a rule reading whole events is held to the records
// it will see: accepted with 4 KiB records, refused with the default 1 MiB.
func TestServiceCostBoundRecordLimit(t *testing.T) {
	doc := []byte(rulesA + "  whole: {stream: tx, action: review, when: 'len(toJSON($env)) > 100'}\n")
	for _, tt := range []struct {
		limit int
		ok    bool
	}{{4 << 10, true}, {0, false}} {
		svc, _ := testService(t, rulesA, func(c *Config) { c.MaxRecordBytes = tt.limit })
		_, err := svc.Publish(context.Background(), doc, 1, "t", "")
		if (err == nil) != tt.ok {
			t.Errorf("record limit %d: Publish: %v, want ok %v", tt.limit, err, tt.ok)
		}
	}
}

// TestQuarantineNeverDropped: however many quarantines the tasks ask for at
// once, each rule that exists ends up disabled, in one version each, by
// "vigil"; names of rules that do not exist are let go.
func TestQuarantineNeverDropped(t *testing.T) {
	svc, _ := testService(t, rulesB)
	for i := range 40 {
		svc.quarantine(fmt.Sprintf("gone%d", i))
	}
	svc.quarantine("never")
	svc.quarantine("fives")
	svc.quarantine("fives")
	for i := 0; ; i++ {
		cur := svc.Current()
		if strings.Count(cur.Document, `"disabled"`) == 2 {
			break
		}
		if i == 200 {
			t.Fatalf("after 20s: version %d: %s", cur.Number, cur.Document)
		}
		time.Sleep(100 * time.Millisecond) // polling the quarantiner's publications
	}
	vs := svc.Versions()
	for _, v := range vs[1:] {
		if v.Author != quarantineAuthor {
			t.Errorf("version %d by %q", v.Number, v.Author)
		}
	}
	if len(vs) != 3 {
		t.Errorf("%d versions, want the seed and one per quarantined rule", len(vs))
	}
}

// inspectingHistory holds one event, and calls inspect on every read: the
// watchdog's look at the task, taken while a rule evaluation runs.
type inspectingHistory struct{ inspect func() }

func (h *inspectingHistory) Past(int, int64) []rules.Past {
	h.inspect()
	return []rules.Past{{}}
}

func (h *inspectingHistory) Values(int, int64) []any {
	h.inspect()
	return []any{map[string]any{"s": "x"}}
}

func (h *inspectingHistory) Failure(int, int64, int, int) string {
	h.inspect()
	return ""
}
