package api

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/vigil-cep/vigil/service"
)

// Recent decisions limits.
const (
	defaultRecentDecisions = 50
	maxRecentDecisions     = 500
)

// recentDecisions is GET /v1/decisions.
type recentDecisions struct {
	Decisions []json.RawMessage `json:"decisions"` // newest first
	Scanned   int               `json:"scanned"`   // records looked through to find them
}

// listDecisions is GET /v1/decisions?limit=&action=&rule=: the newest
// decisions, for a live view (the console polls it).
func (h *Handler) listDecisions(w http.ResponseWriter, r *http.Request) {
	limit, ok := h.intQuery(w, r, "limit", defaultRecentDecisions, 1, maxRecentDecisions)
	if !ok {
		return
	}
	q := service.DecisionQuery{Limit: int(limit), Action: r.URL.Query().Get("action"), Rule: r.URL.Query().Get("rule")}
	switch q.Action {
	case "", "allow", "review", "block":
	default:
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "action must be allow, review or block, not "+q.Action)
		return
	}
	recs, scanned, err := h.b.RecentDecisions(r.Context(), q)
	if err != nil {
		h.backendError(w, r, "list recent decisions", err)
		return
	}
	if recs == nil {
		recs = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, recentDecisions{Decisions: recs, Scanned: scanned})
}

// explainedSize bounds explainedCache: the ids whose features the handler
// remembers.
const explainedSize = 10_000

// explainedCache remembers the features of the decisions this handler
// answered with features (POST /v1/decisions), so that GET
// /v1/decisions/{id} shows them too when the Backend's Decision returns
// the record alone (the service's does). Bounded: past explainedSize ids
// the oldest is forgotten. Safe for concurrent use; mu is never held
// across a call out.
type explainedCache struct {
	mu struct {
		sync.Mutex
		byID map[string]map[string]map[string]any
		ring []string // ids in insertion order, explainedSize at most
		next int      // where the next id goes once ring is full
	}
}

func (c *explainedCache) put(id string, f map[string]map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.byID == nil {
		c.mu.byID = make(map[string]map[string]map[string]any)
	}
	if _, ok := c.mu.byID[id]; ok {
		c.mu.byID[id] = f
		return
	}
	c.mu.byID[id] = f
	if len(c.mu.ring) < explainedSize {
		c.mu.ring = append(c.mu.ring, id)
		return
	}
	delete(c.mu.byID, c.mu.ring[c.mu.next])
	c.mu.ring[c.mu.next] = id
	c.mu.next = (c.mu.next + 1) % explainedSize
}

func (c *explainedCache) get(id string) map[string]map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.byID[id]
}

// remember keeps the features of a decision just answered.
func (h *Handler) remember(d *service.Decision) {
	if len(d.Features) == 0 {
		return
	}
	var rec struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(d.Record, &rec) == nil && rec.ID != "" {
		h.explained.put(rec.ID, d.Features)
	}
}
