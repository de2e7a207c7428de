package rules

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExplain: a rule's features are the non-literal operands of its
// comparisons, evaluated in the rule's context.
func TestExplain(t *testing.T) {
	src, err := os.ReadFile("../examples/fraud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	var got = map[string][]string{}
	for _, r := range rs.Rules {
		for _, f := range r.features {
			got[r.Name] = append(got[r.Name], f.src)
		}
	}
	want := map[string][]string{
		"many_ips":       {`len(uniq(map(history("transactions", "5m"), .ip)))`},
		"card_testing":   {`count(history("transactions", "1m"), .amount <= 2)`},
		"ato_spend":      {`amount`, `count(history("logins", "30m"), .status == "FAILED")`, `any(history("devices", "30m"), .event == "new_device")`},
		"large_amount":   {`amount`},
		"takeover_spend": {`amount`, `len(history("ato", "30m"))`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	tIdx := rs.streamIndex["transactions"]
	preds := len(rs.Streams[tIdx].predicates)
	hist := &Recorded{}
	ev, err := rs.NewEvaluator(hist)
	if err != nil {
		t.Fatal(err)
	}
	tx := map[string]any{"amount": 1.5, "ip": "a"}
	for _, h := range []map[string]any{{"amount": 1.0, "ip": "a"}, {"amount": 3.0, "ip": "b"}, tx} {
		m, errs := ev.Mark(tIdx, MapFields(h))
		hist.Add(h, m, errs)
	}
	idx := map[string]int{}
	for i, r := range rs.Rules {
		idx[r.Name] = i
	}
	if got := ev.Explain(idx["card_testing"], MapFields(tx)); got[`count(history("transactions", "1m"), .amount <= 2)`] != 2 {
		t.Errorf("card_testing features: %v", got)
	}
	if got := ev.Explain(idx["many_ips"], MapFields(tx)); got[`len(uniq(map(history("transactions", "5m"), .ip)))`] != 2 {
		t.Errorf("many_ips features: %v", got)
	}
	if len(rs.Streams[tIdx].predicates) != preds {
		t.Errorf("Explain registered new element predicates: %d, was %d", len(rs.Streams[tIdx].predicates), preds)
	}
}
