package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// decidingStreams are the streams of one ruleset version that decide.
type decidingStreams struct {
	number  int64
	digest  string
	streams []string // sorted
}

// decideStream picks the stream a decision is asked of: the ?stream= one,
// which must decide, or the only deciding stream. On failure it has
// answered.
func (h *Handler) decideStream(w http.ResponseWriter, r *http.Request, stream string) (string, bool) {
	cur, err := h.b.Ruleset(r.Context())
	if err != nil || cur == nil || cur.Number == 0 {
		if err == nil || errors.Is(err, service.ErrNotFound) {
			h.problem(w, r, http.StatusServiceUnavailable, probUnavailable, "no ruleset was published yet")
			return "", false
		}
		h.backendError(w, r, "read the current ruleset", err)
		return "", false
	}
	ds := h.deciding.Load()
	if ds == nil || ds.number != cur.Number || ds.digest != cur.Digest {
		ds = &decidingStreams{number: cur.Number, digest: cur.Digest}
		if doc, err := rules.Parse(cur.Document); err == nil {
			for name, spec := range doc.Streams {
				if spec != nil && spec.Decide != rules.DecideNever {
					ds.streams = append(ds.streams, name)
				}
			}
			slices.Sort(ds.streams)
		}
		h.deciding.Store(ds)
	}
	switch {
	case stream != "":
		if slices.Contains(ds.streams, stream) {
			return stream, true
		}
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("stream %q does not decide in version %d (deciding streams: %s)", stream, cur.Number, listOrNone(ds.streams)))
	case len(ds.streams) == 1:
		return ds.streams[0], true
	case len(ds.streams) == 0:
		h.problem(w, r, http.StatusConflict, probConflict, fmt.Sprintf("no stream decides in version %d", cur.Number))
	default:
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "several streams decide; name one with ?stream= ("+strings.Join(ds.streams, ", ")+")")
	}
	return "", false
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// postDecision is POST /v1/decisions: the body is the event, a JSON object.
func (h *Handler) postDecision(w http.ResponseWriter, r *http.Request) {
	body, _, ok := h.readBody(w, r, h.maxBody, jsonOnly)
	if !ok {
		return
	}
	if !json.Valid(body) {
		var v any
		h.problem(w, r, http.StatusBadRequest, probMalformedJSON, malformedJSON(body, json.Unmarshal(body, &v)))
		return
	}
	// What encoding/json lets pass and Vigil refuses: a string that is not
	// Unicode text (invalid UTF-8, an unpaired surrogate escape), which
	// encoding/json would turn into U+FFFD and so merge different ids and
	// keys (see internal/jsonv), and nesting deeper than jsonv.MaxDepth.
	if _, err := jsonv.Skip(string(body)); err != nil {
		var se *jsonv.SyntaxError
		if errors.As(err, &se) {
			line, col := lineCol(body, int64(se.Offset))
			h.problem(w, r, http.StatusBadRequest, probMalformedJSON, fmt.Sprintf("line %d, column %d: %s", line, col, se.Msg))
			return
		}
	}
	if !jsonObjectStart(body) {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "the body must be the event as a JSON object")
		return
	}
	stream, ok := h.decideStream(w, r, query(r, "stream"))
	if !ok {
		return
	}
	d, replay, err := h.b.Decide(r.Context(), stream, body)
	if owner, ok := h.canForward(r, err); ok {
		h.forward(w, r, owner, body)
		return
	}
	if err != nil {
		h.backendError(w, r, "decide", err)
		return
	}
	if replay {
		w.Header().Set("Idempotent-Replay", "true")
	}
	writeDecision(w, d)
}

// getDecision is GET /v1/decisions/{id}.
func (h *Handler) getDecision(w http.ResponseWriter, r *http.Request) {
	id, ok := pathParam(r, "id")
	if !ok {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed id in the URL")
		return
	}
	d, err := h.b.Decision(r.Context(), id)
	if err != nil {
		h.backendError(w, r, fmt.Sprintf("decision %q", id), err)
		return
	}
	writeDecision(w, d)
}

// writeDecision answers with a decision: what writeJSON writes for it,
// without encoding/json's pass over the record, which the engine wrote
// compact and valid (a tenth of the handler's own time per decision).
func writeDecision(w http.ResponseWriter, d *service.Decision) {
	b := append([]byte(`{"decision":`), d.Record...)
	if d.Features != nil {
		b = jsonv.Append(append(b, `,"features":`...), d.Features)
	}
	writeBody(w, http.StatusOK, append(b, "}\n"...))
}
