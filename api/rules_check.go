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
	"github.com/vigil-cep/vigil/service"
)

// validate is POST /v1/rules:validate: load a document, or one item in the
// context of the current document, and report every mistake with its
// position.
//
// The body is a whole document (JSON or YAML), or one candidate item in the
// shape backtest takes it: {"rule": {"name": …, …}} (likewise "stream",
// "window", …). The item is merged into the current version's document,
// replacing the item of that name, and the result is loaded, so that it is
// checked against the live streams, fields and other items; the positions
// of its errors are those of the merged document, re-encoded as for item
// edits, and their paths and snippets name the item.
func (h *Handler) validate(w http.ResponseWriter, r *http.Request) {
	body, f, ok := h.readBody(w, r, h.maxBody, jsonOrYAML)
	if !ok {
		return
	}
	doc := body
	var against *int64 // the live version an item was checked against
	if k, raw, isItem, ok := h.validateItem(w, r, body, f); !ok {
		return
	} else if isItem {
		var cur *service.Version
		if doc, cur, ok = h.mergeCandidate(w, r, k, raw); !ok {
			return
		}
		against = &cur.Number
	}
	if _, err := rules.Load(doc); err != nil {
		if list, ok := asErrorList(err); ok {
			h.invalidDocument(w, r, list)
			return
		}
		h.problem(w, r, http.StatusUnprocessableEntity, probInvalidRuleset, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, validation{Valid: true, Version: against})
}

// validation is the answer of POST /v1/rules:validate.
type validation struct {
	Valid bool `json:"valid"`
	// Version is the live version a single item was checked against.
	Version *int64 `json:"version,omitempty"`
}

// validateItem tells a single candidate item from a document: a mapping
// whose keys include an item kind's singular ("rule") is an item, and then
// must hold only that key, with an object. On failure it has answered 400.
func (h *Handler) validateItem(w http.ResponseWriter, r *http.Request, body []byte, f format) (k rulesdoc.Kind, item map[string]any, isItem, ok bool) {
	var top map[string]any
	if f == formatJSON {
		var v any
		if decodeJSON(body, &v, false) != nil {
			return k, nil, false, true // not JSON: rules.Load says where
		}
		top, _ = rulesdoc.Normalize(v).(map[string]any)
	} else if doc, err := rulesdoc.Parse(body); err == nil {
		top = doc
	}
	i := slices.IndexFunc(h.kinds, func(c rulesdoc.Kind) bool { _, ok := top[c.Singular]; return ok })
	if i < 0 {
		return k, nil, false, true
	}
	k = h.kinds[i]
	if len(top) != 1 {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf(`send one candidate item, {%q: {"name": …, …}}, and nothing else; or a whole document`, k.Singular))
		return k, nil, false, false
	}
	item, _ = top[k.Singular].(map[string]any)
	if item == nil {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("%s must be an object (the item's fields and its name)", k.Singular))
		return k, nil, false, false
	}
	return k, item, true, true
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
	var before bool
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
		case "before":
			if err := json.Unmarshal(raw, &before); err != nil {
				h.problem(w, r, http.StatusBadRequest, probBadRequest, "before must be true or false")
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
		item, ok := h.decodeItem(w, r, itemRaw, formatJSON)
		if !ok {
			return
		}
		if candidate, _, ok = h.mergeCandidate(w, r, *itemKind, item); !ok {
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
	// The OpenAPI document promises objects and arrays, never null: a
	// Backend that leaves them nil still answers {} and [].
	rep := *report
	rep.Hits, rep.NewHits, rep.ChangedByAction = orEmpty(rep.Hits), orEmpty(rep.NewHits), orEmpty(rep.ChangedByAction)
	if rep.Samples == nil {
		rep.Samples = []json.RawMessage{}
	}
	if before {
		rep.Before = map[string]json.RawMessage{}
		if len(rep.Samples) > 0 {
			if rep.Before, err = h.backtestBefore(ctx, events, rep.Samples); err != nil {
				h.backendError(w, r, "backtest (the current ruleset's decisions)", err)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, &rep)
}

func (h *Handler) backtestFields() []string {
	fs := []string{"ruleset", "events", "limit", "before"}
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

// mergeCandidate puts one candidate item into the current document and
// returns the result and the version it was merged into. On failure it has
// answered.
func (h *Handler) mergeCandidate(w http.ResponseWriter, r *http.Request, k rulesdoc.Kind, item map[string]any) ([]byte, *service.Version, bool) {
	name, ok := h.takeName(w, r, k, item, "")
	if !ok {
		return nil, nil, false
	}
	cur, ok := h.current(w, r)
	if !ok {
		return nil, nil, false
	}
	doc, err := rulesdoc.Parse(cur.Document)
	if err != nil {
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("the current version %d does not parse", cur.Number))
		return nil, nil, false
	}
	doc.Set(k.Plural, name, item)
	src, err := doc.Encode()
	if err != nil {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, err.Error())
		return nil, nil, false
	}
	return src, cur, true
}
