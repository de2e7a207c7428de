package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/rules"
)

// TestGuardedRuleQuarantined: a rule evaluation the guard stops shows in its
// decision's errors, is reported once, and the task skips the rule from then
// on, with an error that says why. (StopAll stops both rules here; the
// watchdog stops one evaluation, kafka's TestWatchdogStopsASlowRule.)
func TestGuardedRuleQuarantined(t *testing.T) {
	rs := mustLoad(t, `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true, max_future_skew: 0s}
rules:
  a_slow: {stream: tx, action: block, when: 'len(history("tx", "1h")) >= 0'}
  b_fine: {stream: tx, action: review, when: 'ts > 0'}
`)
	g := new(rules.Guard)
	var reported []string
	task := newOutputTask(t, rs, Guarded(g, func(rule string) { reported = append(reported, rule) }))
	if outs, _ := task.tx("t1", "u1", 1000); !strings.Contains(outs[0], `"action":"block"`) {
		t.Fatalf("unguarded: %q", outs)
	}
	g.StopAll()
	outs, _ := task.tx("t2", "u1", 2000)
	wantOne(t, "stopped", outs, "decision", `"rule":"a_slow","error":"rule a_slow: stopped: the evaluation ran longer than the rule time limit"`)
	if fmt.Sprint(reported) != "[a_slow b_fine]" {
		t.Fatalf("reported %v", reported)
	}
	outs, _ = task.tx("t3", "u1", 3000)
	wantOne(t, "quarantined", outs, "decision", `"rule":"a_slow","error":"quarantined: an earlier evaluation ran longer than the rule time limit"},{"rule":"b_fine"`)
	if fmt.Sprint(reported) != "[a_slow b_fine]" {
		t.Errorf("reported again: %v", reported)
	}
}

// TestFieldBound: a field an expression reads, longer than its stream's
// max_field_bytes, sends the event to the DLQ with the reason (the cost
// bound assumes it); a long field nothing reads does not matter.
func TestFieldBound(t *testing.T) {
	for _, decide := range []string{"true", "watermark"} { // slots, and events decoded whole
		rs := mustLoad(t, `
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: `+decide+`, max_future_skew: 0s, max_field_bytes: 8}
rules:
  m: {stream: tx, action: block, when: 'merchant == "acme"'}
`)
		task := newOutputTask(t, rs)
		rec := Record{Stream: 0, StreamName: "tx", Value: `{"tx_id":"t1","user_id":"u1","ts":1,"merchant":"a merchant name","note":"a long note nobody reads"}`}
		task.Process([]*Record{&rec})
		wantOne(t, "decide: "+decide, task.out, "dlq", `field \"merchant\" is 17 bytes, more than max_field_bytes (8) of stream tx`)
		task.out = nil
		rec = Record{Stream: 0, StreamName: "tx", Value: `{"tx_id":"t2","user_id":"u1","ts":2,"merchant":"acme","note":"a long note nobody reads"}`}
		task.Process([]*Record{&rec})
		if rec.Err != nil {
			t.Errorf("decide: %s: a long field nobody reads: %v", decide, rec.Err)
		}
	}
}
