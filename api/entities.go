package api

import (
	"fmt"
	"math"
	"net/http"

	"github.com/vigil-cep/vigil/service"
)

// Entity view limits.
const (
	defaultEntityLimit = 100
	maxEntityLimit     = 1000
)

// getEntity is GET /v1/entities/{key}?limit=&before=&stream=.
func (h *Handler) getEntity(w http.ResponseWriter, r *http.Request) {
	key, ok := pathParam(r, "key")
	if !ok {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed key in the URL")
		return
	}
	limit, ok := h.intQuery(w, r, "limit", defaultEntityLimit, 1, maxEntityLimit)
	if !ok {
		return
	}
	before, ok := h.intQuery(w, r, "before", 0, 0, math.MaxInt64)
	if !ok {
		return
	}
	q := service.EntityQuery{Limit: int(limit), Before: before, Stream: query(r, "stream")}
	e, err := h.b.Entity(r.Context(), key, q)
	if owner, ok := h.canForward(r, err); ok {
		h.forward(w, r, owner, nil)
		return
	}
	if err != nil {
		h.backendError(w, r, fmt.Sprintf("entity %q", key), err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}
