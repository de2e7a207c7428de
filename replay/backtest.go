package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// Backtest replays input under the current and the candidate rulesets, each
// on its own copy of the state (nothing live is touched), and compares their
// decisions by id: the first decision of each id counts. Lines that carry
// their record's timestamp (kafka's backtest over topic data writes it) have
// their max_future_skew and idleness judged on it, as the service judged
// them (see the package doc). The two replays run at once, on a goroutine
// Backtest waits for; an error says which ruleset's replay failed.
func Backtest(ctx context.Context, current, candidate *rules.Ruleset, input []byte, samples int, cfg Config) (*service.BacktestReport, error) {
	type result struct {
		out   bytes.Buffer
		stats engine.Stats
		err   error
	}
	var cur, cand result
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur.stats, cur.err = Run(ctx, current, bytes.NewReader(input), &cur.out, cfg)
	}()
	cand.stats, cand.err = Run(ctx, candidate, bytes.NewReader(input), &cand.out, cfg)
	<-done
	if cur.err != nil {
		return nil, fmt.Errorf("current ruleset: %w", cur.err)
	}
	if cand.err != nil {
		return nil, fmt.Errorf("candidate ruleset: %w", cand.err)
	}
	before, err := decisionsByID(&cur.out)
	if err != nil {
		return nil, err
	}
	rep := &service.BacktestReport{Events: cand.stats.Records, Hits: map[string]int64{}, NewHits: map[string]int64{},
		ChangedByAction: map[string]int64{}, Samples: []json.RawMessage{}}
	err = eachDecision(&cand.out, func(id string, d *decisionView, raw []byte) {
		rep.Decisions++
		old := before[id]
		for _, r := range d.matched() {
			rep.Hits[r]++
			if old == nil || !old.hit(r) {
				rep.NewHits[r]++
			}
		}
		if old != nil && old.Action != d.Action {
			rep.Changed++
			rep.ChangedByAction[old.Action+"->"+d.Action]++
		}
		// A shadow rule promoted to active changes the action and not the
		// rules matched (shadow ones count): both make a sample.
		if (old == nil || old.Action != d.Action || fmt.Sprint(old.matched()) != fmt.Sprint(d.matched())) && len(rep.Samples) < samples {
			rep.Samples = append(rep.Samples, append(json.RawMessage(nil), raw...))
		}
	})
	return rep, err
}

// decisionView is what a backtest reads of a decision record.
type decisionView struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Rules  []struct {
		Rule string `json:"rule"`
	} `json:"rules"`
	Shadow []struct {
		Rule string `json:"rule"`
	} `json:"shadow"`
}

func (d *decisionView) matched() []string {
	var out []string
	for _, r := range d.Rules {
		out = append(out, r.Rule)
	}
	for _, r := range d.Shadow {
		out = append(out, r.Rule)
	}
	return out
}

func (d *decisionView) hit(rule string) bool {
	for _, r := range d.matched() {
		if r == rule {
			return true
		}
	}
	return false
}

func decisionsByID(out io.Reader) (map[string]*decisionView, error) {
	m := make(map[string]*decisionView)
	err := eachDecision(out, func(id string, d *decisionView, _ []byte) { m[id] = d })
	return m, err
}

// eachDecision calls fn for the first decision of each id in replay output.
func eachDecision(out io.Reader, fn func(id string, d *decisionView, raw []byte)) error {
	seen := make(map[string]bool)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(`{"kind":"decision"`)) {
			continue
		}
		d := new(decisionView)
		if err := json.Unmarshal(line, d); err != nil {
			return err
		}
		if seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		fn(d.ID, d, line)
	}
	return sc.Err()
}
