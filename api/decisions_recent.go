package api

import (
	"encoding/json"
	"net/http"

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
	q := service.DecisionQuery{Limit: int(limit), Action: query(r, "action"), Rule: query(r, "rule")}
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
