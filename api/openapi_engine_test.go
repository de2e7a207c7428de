package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/replay"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// TestOpenAPIEngineRecords: the records the engine writes field by field,
// which no Go type describes, match their schemas as the engine writes
// them: decisions with matched, shadow and failed rules; an entity view
// with history, windows, partial matches and recent decisions; a backtest
// report with samples.
func TestOpenAPIEngineRecords(t *testing.T) {
	const current = `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
windows:
  spend: {stream: tx, tumbling: 1h, aggregate: {n: count(), total: sum(amount), top: max(amount)}}
patterns:
  pair: {stream: tx, steps: [{name: a, where: amount > 100}, {name: b, where: amount > 100}]}
rules:
  big: {stream: tx, action: review, score: 20, when: 'amount >= 100', reason: '"amount " + string(amount)'}
  huge: {stream: tx, action: block, score: 70, when: 'amount >= 1000'}
  busy: {stream: tx, action: block, score: 50, mode: shadow, when: 'len(history("tx", "1m")) >= 2', reason: '"busy"'}
  broken: {stream: tx, action: block, score: 5, when: 'note > 1'}
`
	events := []string{
		`{"tx_id":"a","user_id":"u1","amount":5,"ts":1000}`,
		`{"tx_id":"b","user_id":"u1","amount":150,"ts":2000,"note":"x"}`,
		`{"tx_id":"c","user_id":"u1","amount":2000,"ts":3000}`,
	}
	rs, err := rules.Load([]byte(current))
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	task, err := engine.NewTask(rs, func(o engine.Output) {
		if o.Kind == engine.KindDecision {
			decisions = append(decisions, string(o.Value))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var input strings.Builder
	for i, ev := range events {
		task.Process([]*engine.Record{{Stream: 0, Value: ev, Offset: int64(i)}})
		fmt.Fprintf(&input, `{"stream":"tx","value":%s}`+"\n", ev)
	}
	all := strings.Join(decisions, "\n")
	for _, shape := range []string{`"rules":[{`, `"shadow":[{`, `"errors":[{`, `"action":"block"`} {
		if !strings.Contains(all, shape) {
			t.Fatalf("no decision with %s: the test no longer covers it:\n%s", shape, all)
		}
	}
	for _, d := range decisions {
		if err := api.ValidateJSON(t, "DecisionRecord", []byte(d)); err != nil {
			t.Errorf("decision %s:\n%v", d, err)
		}
	}

	v := task.Entity("u1", service.EntityQuery{})
	v.LagMillis = 12
	e, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.History["tx"]) == 0 || len(v.Windows) == 0 || v.Partials["pair"] == 0 || len(v.Decisions) == 0 {
		t.Fatalf("the entity view lacks a part the test means to cover: %s", e)
	}
	if err := api.ValidateJSON(t, "Entity", e); err != nil {
		t.Errorf("entity %s:\n%v", e, err)
	}

	cand, err := rules.Load([]byte(strings.Replace(current, "amount >= 1000", "amount >= 10", 1)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.Backtest(t.Context(), rs, cand, []byte(input.String()), 10, replay.Config{Decoders: 1})
	if err != nil {
		t.Fatal(err)
	}
	report, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Samples) == 0 || r.Changed == 0 {
		t.Fatalf("the backtest changed nothing: %s", report)
	}
	if err := api.ValidateJSON(t, "BacktestReport", report); err != nil {
		t.Errorf("backtest report %s:\n%v", report, err)
	}
}
