package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/rules"
)

// backtestBefore returns, by id, the decision the current ruleset makes of
// each sample's event in the same replay ("before": true in a backtest).
//
// A Backend's report holds the candidate's decisions only. So the backtest
// runs a second time with, as the candidate, the current document plus one
// rule per deciding stream that matches every event in shadow mode: every
// decision of that candidate then differs from the current ruleset's (the
// marker rule is new in it) and is sampled, and is otherwise the current
// ruleset's decision, since a shadow rule changes no action, score or
// other rule. The marker is taken out of the records returned. The price
// is a second backtest, which is why it is asked for, not done always.
func (h *Handler) backtestBefore(ctx context.Context, events []byte, samples []json.RawMessage) (map[string]json.RawMessage, error) {
	want := make(map[string]bool, len(samples))
	for _, s := range samples {
		var rec struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(s, &rec) == nil {
			want[rec.ID] = true
		}
	}
	cur, err := h.b.Ruleset(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the current ruleset: %w", err)
	}
	rs, err := rules.Parse(cur.Document)
	if err != nil {
		return nil, fmt.Errorf("parse version %d: %w", cur.Number, err)
	}
	doc, err := rulesdoc.Parse(cur.Document)
	if err != nil {
		return nil, fmt.Errorf("parse version %d: %w", cur.Number, err)
	}
	markers := map[string]bool{}
	for i, name := range slices.Sorted(maps.Keys(rs.Streams)) {
		if spec := rs.Streams[name]; spec == nil || spec.Decide == rules.DecideNever {
			continue
		}
		marker := "vigil_before_" + strconv.Itoa(i)
		for _, taken := doc.Item("rules", marker); taken; _, taken = doc.Item("rules", marker) {
			marker += "_"
		}
		doc.Set("rules", marker, map[string]any{"stream": name, "when": "true", "action": "allow", "mode": "shadow"})
		markers[marker] = true
	}
	baseline, err := doc.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode the baseline: %w", err)
	}
	rep, err := h.b.Backtest(ctx, baseline, events, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(want))
	for _, s := range rep.Samples {
		var rec struct {
			ID     string            `json:"id"`
			Shadow []json.RawMessage `json:"shadow"`
		}
		if json.Unmarshal(s, &rec) != nil || !want[rec.ID] {
			continue
		}
		shadow := slices.DeleteFunc(rec.Shadow, func(hit json.RawMessage) bool {
			var r struct {
				Rule string `json:"rule"`
			}
			return json.Unmarshal(hit, &r) == nil && markers[r.Rule]
		})
		if b, err := replaceField(s, "shadow", append([]json.RawMessage{}, shadow...)); err == nil {
			out[rec.ID] = b
		}
		delete(want, rec.ID)
	}
	return out, nil
}

// replaceField returns the JSON object obj with its field name set to v,
// its fields in their order.
func replaceField(obj json.RawMessage, name string, v any) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		key, _ := json.Marshal(tok)
		buf.Write(key)
		buf.WriteByte(':')
		if tok == name {
			if val, err = json.Marshal(v); err != nil {
				return nil, err
			}
		}
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
