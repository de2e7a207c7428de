package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/service"
)

// versionView is a version as the API shows it: its metadata and, where
// asked, its document as a JSON object.
type versionView struct {
	*service.Version
	Document json.RawMessage `json:"document,omitempty"`
}

// current returns the current version; version 0 with no document when
// nothing was published yet.
func (h *Handler) current(w http.ResponseWriter, r *http.Request) (*service.Version, bool) {
	v, err := h.b.Ruleset(r.Context())
	if errors.Is(err, service.ErrNotFound) || err == nil && v == nil {
		return &service.Version{}, true
	}
	if err != nil {
		h.backendError(w, r, "read the current ruleset", err)
		return nil, false
	}
	return v, true
}

// documentJSON renders a published document as a JSON object.
func documentJSON(v *service.Version) (json.RawMessage, error) {
	doc, err := rulesdoc.Parse(v.Document)
	if err != nil {
		return nil, err
	}
	return rulesdoc.Canonical(map[string]any(doc))
}

// writeVersion answers with a version and its document: JSON by default,
// the document as published when the client prefers YAML.
func (h *Handler) writeVersion(w http.ResponseWriter, r *http.Request, v *service.Version) {
	if wantsYAML(r) {
		w.Header().Set("Content-Type", "application/yaml")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(v.Document)
		return
	}
	doc, err := documentJSON(v)
	if err != nil {
		h.log.ErrorContext(r.Context(), "published document does not parse", "version", v.Number, "err", err)
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("version %d does not parse", v.Number))
		return
	}
	writeJSON(w, http.StatusOK, versionView{Version: v, Document: doc})
}

func (h *Handler) getRuleset(w http.ResponseWriter, r *http.Request) {
	cur, ok := h.current(w, r)
	if !ok {
		return
	}
	w.Header().Set("ETag", etag(cur.Number))
	if cur.Number == 0 {
		h.problem(w, r, http.StatusNotFound, probNotFound, `no ruleset was published yet; PUT one with If-Match: "0"`)
		return
	}
	h.writeVersion(w, r, cur)
}

// putRuleset publishes a whole document as written (YAML keeps its
// comments).
func (h *Handler) putRuleset(w http.ResponseWriter, r *http.Request) {
	m, ok := h.requireIfMatch(w, r)
	if !ok {
		return
	}
	comment, ok := h.comment(w, r)
	if !ok {
		return
	}
	body, _, ok := h.readBody(w, r, h.maxBody, jsonOrYAML)
	if !ok {
		return
	}
	cur, ok := h.current(w, r)
	if !ok || !h.checkIfMatch(w, r, m, cur) {
		return
	}
	v, err := h.b.Publish(r.Context(), body, cur.Number, service.Change{Author: caller(r.Context()).Name, Comment: comment})
	if err != nil {
		h.backendError(w, r, "publish the ruleset", err)
		return
	}
	w.Header().Set("ETag", etag(v.Number))
	writeJSON(w, http.StatusOK, versionView{Version: v})
}

// checkIfMatch answers 412 when m does not match the current version.
func (h *Handler) checkIfMatch(w http.ResponseWriter, r *http.Request, m ifMatch, cur *service.Version) bool {
	if m.matches(cur.Number) {
		return true
	}
	n := cur.Number
	w.Header().Set("ETag", etag(n))
	h.writeProblem(w, r, &problem{
		Type: probPrecondition.uri, Title: probPrecondition.title, Status: http.StatusPreconditionFailed,
		Detail:         fmt.Sprintf("If-Match does not name the current version %d; read it again and retry", n),
		CurrentVersion: &n,
	})
	return false
}

// edit is one change of the current document: beginEdit reads the
// version If-Match names, the handler changes doc, publish publishes it.
type edit struct {
	h       *Handler
	cur     *service.Version
	doc     rulesdoc.Document
	orig    []byte // doc's encoding before the change
	comment string
}

// beginEdit checks If-Match against the current version and parses its
// document. It has answered on failure.
func (h *Handler) beginEdit(w http.ResponseWriter, r *http.Request, m ifMatch, comment string) (*edit, bool) {
	cur, ok := h.current(w, r)
	if !ok || !h.checkIfMatch(w, r, m, cur) {
		return nil, false
	}
	doc, err := rulesdoc.Parse(cur.Document)
	if err != nil {
		h.log.ErrorContext(r.Context(), "current document does not parse", "version", cur.Number, "err", err)
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("the current version %d does not parse", cur.Number))
		return nil, false
	}
	orig, err := doc.Encode()
	if err != nil {
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("the current version %d cannot be written as JSON: %v", cur.Number, err))
		return nil, false
	}
	return &edit{h: h, cur: cur, doc: doc, orig: orig, comment: comment}, true
}

// publish re-encodes the edited document as JSON and publishes it as the
// version after the current one. An edit that changes nothing publishes
// nothing and returns the current version.
func (e *edit) publish(w http.ResponseWriter, r *http.Request) (*service.Version, bool) {
	src, err := e.doc.Encode()
	if err != nil {
		e.h.problem(w, r, http.StatusBadRequest, probBadRequest, err.Error())
		return nil, false
	}
	if e.cur.Number > 0 && bytes.Equal(e.orig, src) {
		return e.cur, true
	}
	v, err := e.h.b.Publish(r.Context(), src, e.cur.Number, service.Change{Author: caller(r.Context()).Name, Comment: e.comment})
	if err != nil {
		e.h.backendError(w, r, "publish the ruleset", err)
		return nil, false
	}
	return v, true
}

// decodeItem reads an item body: a JSON or YAML object.
func (h *Handler) decodeItem(w http.ResponseWriter, r *http.Request, body []byte, f format) (map[string]any, bool) {
	var v any
	if f == formatJSON {
		if err := decodeJSON(body, &v, false); err != nil {
			h.problem(w, r, http.StatusBadRequest, probMalformedJSON, malformedJSON(body, err))
			return nil, false
		}
	} else if err := yaml.Unmarshal(body, &v); err != nil {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed YAML: "+err.Error())
		return nil, false
	}
	item, ok := rulesdoc.Normalize(v).(map[string]any)
	if !ok {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "the body must be an object (the item's fields and its name)")
		return nil, false
	}
	return item, true
}

// takeName removes the item's name from its fields: "name", or "id" for a
// kind whose spec has no id field of its own. want is the name the URL
// gives ("" for a create).
func (h *Handler) takeName(w http.ResponseWriter, r *http.Request, k rulesdoc.Kind, item map[string]any, want string) (string, bool) {
	var names []string
	for _, field := range []string{"name", "id"} {
		if field == "id" && k.IDField {
			continue // a stream's id is its event id expression
		}
		v, ok := item[field]
		if !ok {
			continue
		}
		delete(item, field)
		s, ok := v.(string)
		if !ok || s == "" {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("%q must be a non-empty string", field))
			return "", false
		}
		names = append(names, s)
	}
	if want != "" {
		names = append(names, want)
	}
	names = slices.Compact(names)
	switch len(names) {
	case 0:
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("the %s needs a name: \"name\" in the body", k.Singular))
		return "", false
	case 1:
		return names[0], true
	}
	h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("the body and the URL name different %ss: %q", k.Singular, names))
	return "", false
}

func itemLocation(k rulesdoc.Kind, name string) string {
	return "/v1/" + k.Plural + "/" + url.PathEscape(name)
}

// itemList is GET /v1/{kind}.
type itemList struct {
	Version int64             `json:"version"`
	Items   []json.RawMessage `json:"items"`
}

// currentIndex returns the current version and its item index; on failure it
// has answered.
func (h *Handler) currentIndex(w http.ResponseWriter, r *http.Request) (*service.Version, *rulesdoc.Index, bool) {
	cur, ok := h.current(w, r)
	if !ok {
		return nil, nil, false
	}
	ix := h.index.get(cur)
	if ix.Err != nil {
		h.log.ErrorContext(r.Context(), "current document does not parse", "version", cur.Number, "err", ix.Err)
		h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("the current version %d does not parse", cur.Number))
		return nil, nil, false
	}
	return cur, ix, true
}

func (h *Handler) listItems(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cur, ix, ok := h.currentIndex(w, r)
		if !ok {
			return
		}
		items := ix.Items[k.Plural]
		list := itemList{Version: cur.Number, Items: make([]json.RawMessage, 0, len(items))}
		for _, name := range slices.Sorted(maps.Keys(items)) {
			list.Items = append(list.Items, withNameJSON(name, items[name]))
		}
		w.Header().Set("ETag", etag(cur.Number))
		writeJSON(w, http.StatusOK, list)
	}
}

func (h *Handler) getItem(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := pathParam(r, "id")
		if !ok {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed name in the URL")
			return
		}
		cur, ix, ok := h.currentIndex(w, r)
		if !ok {
			return
		}
		w.Header().Set("ETag", etag(cur.Number))
		item := ix.Get(k.Plural, name)
		if item == nil {
			h.problem(w, r, http.StatusNotFound, probNotFound, fmt.Sprintf("no %s %q in version %d", k.Singular, name, cur.Number))
			return
		}
		writeJSON(w, http.StatusOK, withNameJSON(name, item))
	}
}

// writeHead reads what every item write starts with: If-Match, the
// comment, and (when withBody) the item body.
func (h *Handler) writeHead(w http.ResponseWriter, r *http.Request, withBody bool) (m ifMatch, comment string, item map[string]any, ok bool) {
	if m, ok = h.requireIfMatch(w, r); !ok {
		return
	}
	if comment, ok = h.comment(w, r); !ok || !withBody {
		return
	}
	body, f, ok := h.readBody(w, r, h.maxBody, jsonOrYAML)
	if !ok {
		return m, comment, nil, false
	}
	item, ok = h.decodeItem(w, r, body, f)
	return m, comment, item, ok
}

func (h *Handler) createItem(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, comment, item, ok := h.writeHead(w, r, true)
		if !ok {
			return
		}
		name, ok := h.takeName(w, r, k, item, "")
		if !ok {
			return
		}
		e, ok := h.beginEdit(w, r, m, comment)
		if !ok {
			return
		}
		if _, exists := e.doc.Item(k.Plural, name); exists {
			w.Header().Set("ETag", etag(e.cur.Number))
			h.problem(w, r, http.StatusConflict, probConflict, fmt.Sprintf("%s %q exists; PUT %s to replace it", k.Singular, name, itemLocation(k, name)))
			return
		}
		e.doc.Set(k.Plural, name, item)
		v, ok := e.publish(w, r)
		if !ok {
			return
		}
		w.Header().Set("Location", itemLocation(k, name))
		w.Header().Set("ETag", etag(v.Number))
		writeJSON(w, http.StatusCreated, withName(name, item))
	}
}

func (h *Handler) putItem(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		want, ok := pathParam(r, "id")
		if !ok {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed name in the URL")
			return
		}
		m, comment, item, ok := h.writeHead(w, r, true)
		if !ok {
			return
		}
		name, ok := h.takeName(w, r, k, item, want)
		if !ok {
			return
		}
		e, ok := h.beginEdit(w, r, m, comment)
		if !ok {
			return
		}
		_, existed := e.doc.Item(k.Plural, name)
		e.doc.Set(k.Plural, name, item)
		v, ok := e.publish(w, r)
		if !ok {
			return
		}
		w.Header().Set("ETag", etag(v.Number))
		status := http.StatusOK
		if !existed {
			status = http.StatusCreated
			w.Header().Set("Location", itemLocation(k, name))
		}
		writeJSON(w, status, withName(name, item))
	}
}

func (h *Handler) deleteItem(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := pathParam(r, "id")
		if !ok {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed name in the URL")
			return
		}
		m, comment, _, ok := h.writeHead(w, r, false)
		if !ok {
			return
		}
		e, ok := h.beginEdit(w, r, m, comment)
		if !ok {
			return
		}
		if _, exists := e.doc.Item(k.Plural, name); !exists {
			w.Header().Set("ETag", etag(e.cur.Number))
			h.problem(w, r, http.StatusNotFound, probNotFound, fmt.Sprintf("no %s %q in version %d", k.Singular, name, e.cur.Number))
			return
		}
		e.doc.Remove(k.Plural, name)
		v, ok := e.publish(w, r)
		if !ok {
			return
		}
		w.Header().Set("ETag", etag(v.Number))
		w.WriteHeader(http.StatusNoContent)
	}
}

// rollbackRequest is the body of POST /v1/{kind}/{id}/rollback.
type rollbackRequest struct {
	Version *int64 `json:"version"`
}

// rollbackItem makes the item as it was in a past version the current
// one: restored (200 with the item) or, when it did not exist then,
// deleted (204).
func (h *Handler) rollbackItem(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := pathParam(r, "id")
		if !ok {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed name in the URL")
			return
		}
		m, ok := h.requireIfMatch(w, r)
		if !ok {
			return
		}
		comment, ok := h.comment(w, r)
		if !ok {
			return
		}
		body, _, ok := h.readBody(w, r, h.maxBody, jsonOnly)
		if !ok {
			return
		}
		var req rollbackRequest
		if !h.decodeStrict(w, r, body, &req) {
			return
		}
		if req.Version == nil || *req.Version < 1 {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, `the body must name a version: {"version": n} with n >= 1`)
			return
		}
		target, err := h.b.Version(r.Context(), *req.Version)
		if err != nil {
			h.backendError(w, r, fmt.Sprintf("ruleset version %d", *req.Version), err)
			return
		}
		old, err := rulesdoc.Parse(target.Document)
		if err != nil {
			h.problem(w, r, http.StatusInternalServerError, probInternal, fmt.Sprintf("version %d does not parse", target.Number))
			return
		}
		e, ok := h.beginEdit(w, r, m, comment)
		if !ok {
			return
		}
		item, then := old.Item(k.Plural, name)
		_, now := e.doc.Item(k.Plural, name)
		switch {
		case !then && !now:
			h.problem(w, r, http.StatusNotFound, probNotFound, fmt.Sprintf("no %s %q in version %d nor in the current version %d", k.Singular, name, target.Number, e.cur.Number))
			return
		case then:
			e.doc.Set(k.Plural, name, item)
		default:
			e.doc.Remove(k.Plural, name)
		}
		if e.comment == "" {
			e.comment = fmt.Sprintf("rollback of %s %s to version %d", k.Singular, name, target.Number)
		}
		v, ok := e.publish(w, r)
		if !ok {
			return
		}
		w.Header().Set("ETag", etag(v.Number))
		if !then {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, withName(name, item))
	}
}
