package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
)

// TestBacktestPlantedFraud: a card-testing rule added to a ruleset without
// one is backtested over the `vigil gen` workload: it hits the planted
// card-testing users' transactions, and the report says which decisions
// would change.
func TestBacktestPlantedFraud(t *testing.T) {
	fraud, err := os.ReadFile("../examples/fraud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The current ruleset: the example without its card_testing rule.
	doc := string(fraud)
	i := strings.Index(doc, "  card_testing:")
	j := strings.Index(doc, "  # Account takeover cash-out")
	current, err := rules.Load([]byte(doc[:i] + doc[j:]))
	if err != nil {
		t.Fatal(err)
	}
	candidate, err := rules.Load(fraud)
	if err != nil {
		t.Fatal(err)
	}
	var events bytes.Buffer
	planted, err := workload.Generate(&events, workload.Config{Users: 2000, Events: 60000, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Backtest(context.Background(), current, candidate, events.Bytes(), 20, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NewHits["card_testing"] == 0 || rep.NewHits["many_ips"] != 0 {
		t.Fatalf("new hits %v: want card_testing only", rep.NewHits)
	}
	// Every user the new rule catches has planted card testing.
	testers := map[string]bool{}
	for _, p := range planted {
		if p.Kind == workload.CardTesting {
			testers[p.User] = true
		}
	}
	for _, raw := range rep.Samples {
		var d struct {
			Key   string `json:"key"`
			Rules []struct{ Rule string }
		}
		json.Unmarshal(raw, &d)
		if !testers[d.Key] {
			t.Errorf("sample for %s, who planted no card testing: %s", d.Key, raw)
		}
	}
	if rep.ChangedByAction["allow->block"] == 0 || len(rep.Samples) == 0 {
		t.Errorf("report: %+v", rep)
	}
	t.Logf("%d events, %d decisions, new hits %v, changed %v", rep.Events, rep.Decisions, rep.NewHits, rep.ChangedByAction)
}

// Promoting a shadow rule to active changes decisions' actions and not the
// rules they match: they are samples too.
func TestBacktestPromotedShadowRule(t *testing.T) {
	const doc = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  fives: {stream: tx, action: block, mode: %s, when: 'amount == 5'}
`
	current, err := rules.Load(fmt.Appendf(nil, doc, "shadow"))
	if err != nil {
		t.Fatal(err)
	}
	candidate, err := rules.Load(fmt.Appendf(nil, doc, "active"))
	if err != nil {
		t.Fatal(err)
	}
	input := `{"stream":"tx","value":{"tx_id":"a","user_id":"u","amount":5,"ts":1}}
{"stream":"tx","value":{"tx_id":"b","user_id":"u","amount":6,"ts":2}}
`
	rep, err := Backtest(context.Background(), current, candidate, []byte(input), 10, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed != 1 || len(rep.Samples) != 1 || !strings.Contains(string(rep.Samples[0]), `"id":"a"`) {
		t.Fatalf("changed %d, samples %s; want the decision of a", rep.Changed, rep.Samples)
	}
}
