package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/rules"
)

// validate is POST /v1/rules:validate: load a document and report every
// mistake with its position.
func (h *Handler) validate(w http.ResponseWriter, r *http.Request) {
	body, _, ok := h.readBody(w, r, h.maxBody, jsonOrYAML)
	if !ok {
		return
	}
	if _, err := rules.Load(body); err != nil {
		if list, ok := asErrorList(err); ok {
			h.invalidDocument(w, r, list)
			return
		}
		h.problem(w, r, http.StatusUnprocessableEntity, probInvalidRuleset, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"valid": true})
}

// Backtest limits.
const (
	defaultBacktestSamples = 20
	maxBacktestSamples     = 1000
)

// backtest is POST /v1/rules:backtest. The body names a candidate, either
// a whole document ({"ruleset": object or YAML string}) or one item merged
// into the current document ({"rule": {"name": …, …}}, likewise "stream",
// "window", …), optional events ("events": NDJSON string, or an array of
// replay records) and the number of changed decisions to sample ("limit").
func (h *Handler) backtest(w http.ResponseWriter, r *http.Request) {
	body, _, ok := h.readBody(w, r, h.maxBacktest, jsonOnly)
	if !ok {
		return
	}
	var fields map[string]json.RawMessage
	if err := decodeJSON(body, &fields, false); err != nil || fields == nil {
		var te *json.UnmarshalTypeError
		if err == nil || errors.As(err, &te) {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "the body must be an object")
		} else {
			h.problem(w, r, http.StatusBadRequest, probMalformedJSON, malformedJSON(body, err))
		}
		return
	}
	limit := defaultBacktestSamples
	var events []byte
	var candidate []byte
	var itemKind *rulesdoc.Kind
	var itemRaw json.RawMessage
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[f]
		switch f {
		case "limit":
			if err := json.Unmarshal(raw, &limit); err != nil || limit < 0 || limit > maxBacktestSamples {
				h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("limit must be an integer in [0, %d]", maxBacktestSamples))
				return
			}
		case "events":
			var err error
			if events, err = backtestEvents(raw); err != nil {
				h.problem(w, r, http.StatusBadRequest, probBadRequest, err.Error())
				return
			}
		case "ruleset":
			var s string
			switch {
			case json.Unmarshal(raw, &s) == nil:
				candidate = []byte(s)
			case jsonObjectStart(raw):
				candidate = raw
			default:
				h.problem(w, r, http.StatusBadRequest, probBadRequest, "ruleset must be a document object or a YAML string")
				return
			}
		default:
			i := slices.IndexFunc(h.kinds, func(k rulesdoc.Kind) bool { return k.Singular == f })
			if i < 0 {
				h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("unknown field %q (known: %s)", f, strings.Join(h.backtestFields(), ", ")))
				return
			}
			if itemKind != nil {
				h.problem(w, r, http.StatusBadRequest, probBadRequest, "name one candidate item, or a whole ruleset")
				return
			}
			itemKind, itemRaw = &h.kinds[i], raw
		}
	}
	switch {
	case candidate != nil && itemKind != nil:
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "name one candidate: a ruleset or one item, not both")
		return
	case candidate == nil && itemKind == nil:
		h.problem(w, r, http.StatusBadRequest, probBadRequest, `name a candidate: {"ruleset": …} or {"rule": {"name": …, …}}`)
		return
	case itemKind != nil:
		if candidate, ok = h.mergeCandidate(w, r, *itemKind, itemRaw); !ok {
			return
		}
	}
	if _, err := rules.Load(candidate); err != nil {
		if list, ok := asErrorList(err); ok {
			h.invalidDocument(w, r, list)
			return
		}
		h.problem(w, r, http.StatusUnprocessableEntity, probInvalidRuleset, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.backtestTimeout)
	defer cancel()
	// Past the server's WriteTimeout, which is sized for quick requests.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.backtestTimeout + 10*time.Second))
	report, err := h.b.Backtest(ctx, candidate, events, limit)
	if err != nil {
		h.backendError(w, r, "backtest", err)
		return
	}
	writeJSON(w, http.StatusOK, report)
}

func (h *Handler) backtestFields() []string {
	fs := []string{"ruleset", "events", "limit"}
	for _, k := range h.kinds {
		fs = append(fs, k.Singular)
	}
	return fs
}

// backtestEvents reads "events": an NDJSON string or an array of records.
func backtestEvents(raw json.RawMessage) ([]byte, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s), nil
	}
	var recs []json.RawMessage
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, fmt.Errorf("events must be an NDJSON string or an array of replay records")
	}
	if recs == nil {
		return nil, nil // null: the retained input topics
	}
	var buf bytes.Buffer
	for _, rec := range recs {
		if err := json.Compact(&buf, rec); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// mergeCandidate puts one candidate item into the current document.
func (h *Handler) mergeCandidate(w http.ResponseWriter, r *http.Request, k rulesdoc.Kind, raw json.RawMessage) ([]byte, bool) {
	item, ok := h.decodeItem(w, r, raw, formatJSON)
	if !ok {
		return nil, false
	}
	name, ok := h.takeName(w, r, k, item, "")
	if !ok {
		return nil, false
	}
	cur, ok := h.current(w, r)
	if !ok {
		return nil, false
	}
	doc, err := rulesdoc.Parse(cur.Document)
	if err != nil {
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("the current version %d does not parse", cur.Number))
		return nil, false
	}
	doc.Set(k.Plural, name, item)
	src, err := doc.Encode()
	if err != nil {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, err.Error())
		return nil, false
	}
	return src, true
}
