package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/service"
)

// versions returns every version oldest first, without reordering the
// Backend's own slice.
func (h *Handler) versions(w http.ResponseWriter, r *http.Request) ([]*service.Version, bool) {
	vs, err := h.b.Versions(r.Context())
	if err != nil {
		h.backendError(w, r, "list ruleset versions", err)
		return nil, false
	}
	if !slices.IsSortedFunc(vs, func(a, b *service.Version) int { return cmp.Compare(a.Number, b.Number) }) {
		vs = slices.Clone(vs)
		sortVersions(vs)
	}
	return vs, true
}

// pageParams reads ?limit= and ?before=.
func (h *Handler) pageParams(w http.ResponseWriter, r *http.Request) (limit int, before int64, ok bool) {
	l, ok := h.intQuery(w, r, "limit", defaultPage, 1, maxPage)
	if !ok {
		return 0, 0, false
	}
	before, ok = h.intQuery(w, r, "before", 0, 0, math.MaxInt64)
	return int(l), before, ok
}

// versionPage is GET /v1/ruleset/versions.
type versionPage struct {
	Versions []*service.Version `json:"versions"`
	// NextBefore is the ?before= of the next (older) page; absent at the end.
	NextBefore int64 `json:"next_before,omitempty"`
}

func (h *Handler) listVersions(w http.ResponseWriter, r *http.Request) {
	limit, before, ok := h.pageParams(w, r)
	if !ok {
		return
	}
	vs, ok := h.versions(w, r)
	if !ok {
		return
	}
	page, next := newestFirst(vs, before, limit)
	out := versionPage{Versions: make([]*service.Version, 0, len(page)), NextBefore: next}
	for _, i := range page {
		out.Versions = append(out.Versions, vs[i])
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) getVersion(w http.ResponseWriter, r *http.Request) {
	s, _ := pathParam(r, "n")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("version must be a positive integer, not %q", s))
		return
	}
	v, err := h.b.Version(r.Context(), n)
	if err != nil {
		h.backendError(w, r, fmt.Sprintf("ruleset version %d", n), err)
		return
	}
	h.writeVersion(w, r, v)
}

// auditEntry is one ruleset version in the audit log: who changed what,
// when and why, item by item against the version before it.
type auditEntry struct {
	*service.Version
	Previous int64             `json:"previous"` // 0 for the first version
	Changes  []rulesdoc.Change `json:"changes"`
	Error    string            `json:"error,omitempty"` // a document that did not parse
}

type auditPage struct {
	Entries    []auditEntry `json:"entries"`
	NextBefore int64        `json:"next_before,omitempty"`
}

func (h *Handler) audit(w http.ResponseWriter, r *http.Request) {
	limit, before, ok := h.pageParams(w, r)
	if !ok {
		return
	}
	vs, ok := h.versions(w, r)
	if !ok {
		return
	}
	page, next := newestFirst(vs, before, limit)
	out := auditPage{Entries: make([]auditEntry, 0, len(page)), NextBefore: next}
	for _, i := range page {
		var prev *service.Version
		if i > 0 {
			prev = vs[i-1]
		}
		a, b := h.index.get(prev), h.index.get(vs[i])
		e := auditEntry{Version: vs[i], Changes: []rulesdoc.Change{}}
		if prev != nil {
			e.Previous = prev.Number
		}
		switch {
		case b.Err != nil:
			e.Error = b.Err.Error()
		case a.Err != nil:
			e.Error = fmt.Sprintf("version %d: %v", prev.Number, a.Err)
		default:
			e.Changes = rulesdoc.Diff(h.kinds, a, b)
		}
		out.Entries = append(out.Entries, e)
	}
	writeJSON(w, http.StatusOK, out)
}

// itemVersion is an item's content in a version where it changed.
type itemVersion struct {
	Version int64           `json:"version"`
	Time    time.Time       `json:"time"`
	Author  string          `json:"author"`
	Comment string          `json:"comment,omitempty"`
	Deleted bool            `json:"deleted"`
	Item    json.RawMessage `json:"item,omitempty"`
}

type itemHistory struct {
	Kind     string        `json:"kind"`
	Name     string        `json:"name"`
	Versions []itemVersion `json:"versions"` // newest first
}

// itemVersions lists the versions in which an item changed, was created or
// deleted, newest first.
func (h *Handler) itemVersions(k rulesdoc.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := pathParam(r, "id")
		if !ok {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "malformed name in the URL")
			return
		}
		vs, ok := h.versions(w, r)
		if !ok {
			return
		}
		out := itemHistory{Kind: k.Plural, Name: name, Versions: []itemVersion{}}
		var last json.RawMessage
		for _, v := range vs {
			ix := h.index.get(v)
			if ix.Err != nil {
				continue
			}
			cur := ix.Get(k.Plural, name)
			if string(cur) == string(last) {
				continue
			}
			iv := itemVersion{Version: v.Number, Time: v.Time, Author: v.Author, Comment: v.Comment, Deleted: cur == nil}
			if cur != nil {
				iv.Item = withNameJSON(name, cur)
			}
			out.Versions = append(out.Versions, iv)
			last = cur
		}
		if len(out.Versions) == 0 {
			h.problem(w, r, http.StatusNotFound, probNotFound, fmt.Sprintf("%s %q is in no version", k.Singular, name))
			return
		}
		slices.Reverse(out.Versions)
		writeJSON(w, http.StatusOK, out)
	}
}

// withNameJSON adds the name to an item's canonical JSON, as withName does.
func withNameJSON(name string, item json.RawMessage) json.RawMessage {
	var m map[string]any
	if decodeJSON(item, &m, false) != nil {
		return item
	}
	raw, err := rulesdoc.Canonical(withName(name, m))
	if err != nil {
		return item
	}
	return raw
}
