package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/vigil-cep/vigil/rules"
)

// memBackend is a Backend in memory for the HTTP layer's tests: versions in
// a slice, validated by the real rules.Load; decisions in a map.
type memBackend struct {
	mu struct {
		sync.Mutex
		versions     []*service.Version
		decisions    map[string]memDecision
		order        []string // decision ids, oldest first
		recentErr    error    // RecentDecisions fails with it
		ready        error
		conflictOnce bool // the next Publish reports service.ErrVersionConflict
		backtest     struct {
			candidate, events []byte
			limit             int
			calls             int
		}
		entityQuery  service.EntityQuery
		entityKey    string // the key last asked for, exactly
		storeLimit   int    // > 0: Publish refuses larger documents (service.TooLargeError)
		failVersions error
	}
}

type memDecision struct {
	body []byte // canonical event
	d    *service.Decision
}

var memEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newMemBackend() *memBackend {
	b := &memBackend{}
	b.mu.decisions = map[string]memDecision{}
	return b
}

func (b *memBackend) Ruleset(ctx context.Context) (*service.Version, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.versions) == 0 {
		return nil, service.ErrNotFound
	}
	return b.mu.versions[len(b.mu.versions)-1], nil
}

func (b *memBackend) Versions(ctx context.Context) ([]*service.Version, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.failVersions != nil {
		return nil, b.mu.failVersions
	}
	return slices.Clone(b.mu.versions), nil
}

func (b *memBackend) Version(ctx context.Context, n int64) (*service.Version, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 1 || n > int64(len(b.mu.versions)) {
		return nil, service.ErrNotFound
	}
	return b.mu.versions[n-1], nil
}

func (b *memBackend) Publish(ctx context.Context, doc []byte, expect int64, change service.Change) (*service.Version, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.conflictOnce {
		b.mu.conflictOnce = false
		return nil, service.ErrVersionConflict
	}
	if cur := int64(len(b.mu.versions)); expect != cur {
		return nil, service.ErrVersionConflict
	}
	rs, err := rules.Load(doc)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	if b.mu.storeLimit > 0 && len(doc) > b.mu.storeLimit {
		return nil, &service.TooLargeError{Limit: int64(b.mu.storeLimit), Err: fmt.Errorf("the document is %d bytes, more than the store takes (%d)", len(doc), b.mu.storeLimit)}
	}
	n := int64(len(b.mu.versions)) + 1
	v := &service.Version{Number: n, Digest: rs.Version, Document: bytes.Clone(doc), Time: memEpoch.Add(time.Duration(n) * time.Minute), Change: change}
	b.mu.versions = append(b.mu.versions, v)
	return v, nil
}

// Decide reads the event's tx_id. Test switches in the event: "_saturate",
// "_not_owner", "_panic", "_fail".
func (b *memBackend) Decide(ctx context.Context, stream string, body []byte) (*service.Decision, bool, error) {
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, false, fmt.Errorf("decode event: %w", err)
	}
	switch {
	case ev["_saturate"] != nil:
		return nil, false, service.ErrSaturated
	case ev["_not_owner"] != nil:
		return nil, false, fmt.Errorf("route: %w", service.ErrNotOwner)
	case ev["_panic"] != nil:
		panic("memBackend: asked to panic")
	case ev["_fail"] != nil:
		return nil, false, errors.New("memBackend: broken")
	}
	id, _ := ev["tx_id"].(string)
	canon, _ := json.Marshal(ev)
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.mu.decisions[id]; ok {
		if !bytes.Equal(old.body, canon) {
			return nil, false, service.ErrIDConflict
		}
		return old.d, true, nil
	}
	d := &service.Decision{Record: memRecord(id, stream, ev)}
	if amount, _ := ev["amount"].(float64); amount > 100 {
		d.Features = map[string]map[string]any{"big": {"amount": amount}}
	}
	b.mu.decisions[id] = memDecision{body: canon, d: d}
	b.mu.order = append(b.mu.order, id)
	return d, false, nil
}

// memRecord is the decision record of an event, in the engine's format
// (engine.appendDecision): the rule "big" blocks amounts over 100.
func memRecord(id, stream string, ev map[string]any) json.RawMessage {
	type hit struct {
		Rule   string  `json:"rule"`
		Action string  `json:"action"`
		Score  float64 `json:"score"`
		Reason string  `json:"reason"`
	}
	key, _ := ev["user_id"].(string)
	ts, _ := ev["ts"].(float64)
	rec := struct {
		Kind   string     `json:"kind"`
		ID     string     `json:"id"`
		Stream string     `json:"stream"`
		Key    string     `json:"key"`
		Time   int64      `json:"time"`
		Action string     `json:"action"`
		Score  float64    `json:"score"`
		Rules  []hit      `json:"rules"`
		Shadow []hit      `json:"shadow"`
		Errors []struct{} `json:"errors"`
	}{Kind: "decision", ID: id, Stream: stream, Key: key, Time: int64(ts), Action: "allow", Rules: []hit{}, Shadow: []hit{}, Errors: []struct{}{}}
	if amount, _ := ev["amount"].(float64); amount > 100 {
		rec.Action, rec.Score = "block", 10
		rec.Rules = append(rec.Rules, hit{Rule: "big", Action: "block", Score: 10, Reason: "amount over 100"})
	}
	b, _ := json.Marshal(rec)
	return b
}

// Decision returns the record alone, as the service's does: the features
// come from the Handler's memory of what it answered.
func (b *memBackend) Decision(ctx context.Context, id string) (*service.Decision, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.mu.decisions[id]; ok {
		return d.d, nil
	}
	return nil, service.ErrNotFound
}

func (b *memBackend) RecentDecisions(ctx context.Context, q service.DecisionQuery) ([]json.RawMessage, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.recentErr != nil {
		return nil, 0, b.mu.recentErr
	}
	var out []json.RawMessage
	for i := len(b.mu.order) - 1; i >= 0 && len(out) < q.Limit; i-- {
		if rec := b.mu.decisions[b.mu.order[i]].d.Record; q.Selects(rec) {
			out = append(out, rec)
		}
	}
	return out, len(b.mu.order), nil
}

func (b *memBackend) Entity(ctx context.Context, key string, q service.EntityQuery) (*service.Entity, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.entityQuery = q
	b.mu.entityKey = key
	switch key {
	case "u/1", "u1":
		return &service.Entity{Key: key, History: map[string][]json.RawMessage{"transactions": {json.RawMessage(`{"time":1000,"event":{"amount":5}}`)}}, Partials: map[string]int{}, Watermark: 42, LagMillis: 7, Task: 3}, nil
	case "fresh": // on a task that has no watermark yet
		return &service.Entity{Key: key, History: map[string][]json.RawMessage{}, Windows: []json.RawMessage{}, Partials: map[string]int{},
			Decisions: []json.RawMessage{}, Watermark: service.NoWatermark, LagMillis: 12345, Task: 1}, nil
	}
	return nil, service.ErrNotFound
}

func (b *memBackend) Backtest(ctx context.Context, candidate []byte, events []byte, limit int) (*service.BacktestReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.backtest.candidate, b.mu.backtest.events, b.mu.backtest.limit = candidate, events, limit
	b.mu.backtest.calls++
	return &service.BacktestReport{Events: int64(bytes.Count(events, []byte("\n"))), Hits: map[string]int64{}, ChangedByAction: map[string]int64{}, Samples: []json.RawMessage{}}, nil
}

func (b *memBackend) Ready(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.ready
}
