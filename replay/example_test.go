package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
)

// TestExampleRulesetCatchesPlantedFraud replays a vigil gen workload through
// examples/fraud.yaml: every planted fraud transaction must be blocked, and
// few normal ones.
func TestExampleRulesetCatchesPlantedFraud(t *testing.T) {
	var in bytes.Buffer
	cfg := workload.Config{Users: 20_000, Events: 200_000, Seed: 3}
	if testing.Short() {
		cfg = workload.Config{Users: 5000, Events: 50_000, Seed: 3}
	}
	planted, err := workload.Generate(&in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := Run(context.Background(), loadRuleset(t, "../examples/fraud.yaml"), &in, &out, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if st.DLQ != 0 || st.Late != 0 || st.RuleErrors != 0 {
		t.Errorf("a clean workload gave dlq %d, late %d, rule errors %d", st.DLQ, st.Late, st.RuleErrors)
	}
	actions := map[string]string{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d struct{ Kind, ID, Action string }
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		if d.Kind == "decision" {
			actions[d.ID] = d.Action
		}
	}
	fraud := map[string]bool{}
	for _, p := range planted {
		for _, id := range p.TxIDs {
			fraud[id] = true
			if actions[id] != "block" {
				t.Errorf("planted %s transaction %s (user %s): action %q, want block", p.Kind, id, p.User, actions[id])
			}
		}
	}
	flagged := 0
	for id, a := range actions {
		if !fraud[id] && a != "allow" {
			flagged++
		}
	}
	rate := float64(flagged) / float64(len(actions))
	t.Logf("%d planted transactions caught; %d of %d other transactions flagged (%.2f%%)", len(fraud), flagged, len(actions), 100*rate)
	if rate > 0.01 {
		t.Errorf("%.2f%% of transactions flagged besides the planted ones, want at most 1%%", 100*rate)
	}
}
