package engine

import (
	"strconv"

	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// hit is one rule's contribution to a decision: a match, or a run-time error.
type hit struct {
	ri     int // the rule's index
	rule   *rules.Rule
	reason string
	err    string
}

// decide evaluates the stream's active and shadow rules for one event and
// emits the decision (docs/design.md "Decisions"): the action is the most severe of
// the matched active rules, the score their sum; shadow rules are reported
// apart and change nothing; a rule that fails is reported in errors. It
// returns the decision's bytes for the idempotency store, or nil for a plain
// allow, which reemit rebuilds from the key and time.
func (t *Task) decide(st *rules.Stream, id string, ks *keyState, ts int64, fields rules.Fields) []byte {
	t.cur, t.curTime = ks, ts
	hits := t.hits[:0]
	for _, ri := range st.Rules {
		var ok bool
		var err error
		if t.quarantined != nil && t.quarantined[ri] {
			err = errQuarantined
		} else if ok, err = t.ev.When(ri, fields); err != nil {
			t.stopped(ri, err)
		}
		r := t.rs.Rules[ri]
		if err != nil {
			t.stats.RuleErrors++
			hits = append(hits, hit{ri: ri, rule: r, err: err.Error()})
			continue
		}
		if !ok {
			continue
		}
		reason, err := t.ev.Reason(ri, fields)
		if err != nil {
			t.stopped(ri, err)
			t.stats.RuleErrors++
			hits = append(hits, hit{ri: ri, rule: r, err: "reason: " + err.Error()})
		}
		hits = append(hits, hit{ri: ri, rule: r, reason: reason})
		if t.explain != nil {
			t.explain[r.Name] = t.ev.Explain(ri, fields)
		}
	}
	t.ev.Idle()
	t.cur = nil
	t.hits = hits
	t.stats.Decisions++
	t.buf = appendDecision(t.buf[:0], id, st.Name, ks.key, ts, hits)
	info := &t.info
	info.Action, info.Hits = actionOf(hits).String(), info.Hits[:0]
	for _, h := range hits {
		info.Hits = append(info.Hits, RuleHit{Rule: h.rule.Name, Mode: h.rule.Mode.String(), Err: h.err != ""})
	}
	t.out(Output{Kind: KindDecision, Key: id, Value: t.buf, Decision: info})
	if len(hits) == 0 {
		return nil
	}
	return append([]byte(nil), t.buf...)
}

// reemit sends the stored decision of a repeated id again, unchanged.
func (t *Task) reemit(st *rules.Stream, id string, s seen) {
	t.stats.Decisions++
	b := s.decision
	if b == nil {
		t.buf = appendDecision(t.buf[:0], id, st.Name, s.key, s.time, nil)
		b = t.buf
	}
	t.out(Output{Kind: KindDecision, Key: id, Value: b})
}

// appendDecision encodes a decision record (docs/design.md "Decision
// records"). Rules are listed in the ruleset's (name) order, which is
// evaluation order.
func appendDecision(b []byte, id, streamName, key string, ts int64, hits []hit) []byte {
	action, score := actionOf(hits), 0.0
	for _, h := range hits {
		if h.err == "" && h.rule.Mode == rules.Active {
			score += h.rule.Score
		}
	}
	b = appendKind(b, KindDecision)
	b = appendStr(b, "id", id)
	b = appendStr(b, "stream", streamName)
	b = appendStr(b, "key", key)
	b = appendInt(b, "time", ts)
	b = appendStr(b, "action", action.String())
	b = strconv.AppendFloat(appendField(b, "score"), score, 'f', -1, 64)
	b = appendHits(appendField(b, "rules"), hits, rules.Active)
	b = appendHits(appendField(b, "shadow"), hits, rules.Shadow)
	b = append(appendField(b, "errors"), '[')
	n := 0
	for _, h := range hits {
		if h.err == "" {
			continue
		}
		if n++; n > 1 {
			b = append(b, ',')
		}
		b = append(b, `{"rule":`...)
		b = jsonv.AppendString(b, h.rule.Name)
		b = appendStr(b, "error", h.err)
		b = append(b, '}')
	}
	return append(b, ']', '}')
}

// actionOf is a decision's action: the most severe of the active rules
// that matched (docs/design.md "Decisions").
func actionOf(hits []hit) rules.Action {
	action := rules.Allow
	for _, h := range hits {
		if h.err == "" && h.rule.Mode == rules.Active {
			action = max(action, h.rule.Action)
		}
	}
	return action
}

// appendHits encodes the matched rules of one mode as a JSON array.
func appendHits(b []byte, hits []hit, mode rules.Mode) []byte {
	b = append(b, '[')
	n := 0
	for _, h := range hits {
		if h.err != "" || h.rule.Mode != mode {
			continue
		}
		if n++; n > 1 {
			b = append(b, ',')
		}
		b = append(b, `{"rule":`...)
		b = jsonv.AppendString(b, h.rule.Name)
		b = appendStr(b, "action", h.rule.Action.String())
		b = strconv.AppendFloat(appendField(b, "score"), h.rule.Score, 'f', -1, 64)
		b = appendStr(b, "reason", h.reason)
		b = append(b, '}')
	}
	return append(b, ']')
}

// recallKey names a recorded decision: its stream and id.
type recallKey struct{ stream, id string }

// Recall registers a decision record this task emitted before a crash, read
// back from the decisions topic after Restore (docs/design.md "Delivery": a
// decision once emitted is final). When its transaction is replayed, the
// event counts in the state as usual, but the recorded bytes are emitted
// instead of a new decision. It reports whether value is a decision record.
func (t *Task) Recall(value []byte) bool {
	v, err := jsonv.Decode(string(value))
	m, ok := v.(map[string]any)
	if err != nil || !ok || m["kind"] != "decision" {
		return false
	}
	id, ok1 := m["id"].(string)
	st, ok2 := m["stream"].(string)
	if !ok1 || !ok2 {
		return false
	}
	if t.recall == nil {
		t.recall = make(map[recallKey][]byte)
	}
	t.recall[recallKey{st, id}] = append([]byte(nil), value...)
	return true
}

// recalled returns, and forgets, the recorded decision of an event.
func (t *Task) recalled(st *rules.Stream, id string, hasID bool) ([]byte, bool) {
	if len(t.recall) == 0 || !hasID {
		return nil, false
	}
	k := recallKey{st.Name, id}
	b, ok := t.recall[k]
	if ok {
		delete(t.recall, k)
	}
	return b, ok
}
