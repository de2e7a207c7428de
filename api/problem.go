package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// problemType names a kind of error (RFC 9457 "type"). The URNs are stable;
// the package documentation lists them.
type problemType struct {
	uri, title string
}

var (
	probBadRequest      = problemType{"urn:vigil:problem:bad-request", "Bad request"}
	probMalformedJSON   = problemType{"urn:vigil:problem:malformed-json", "Malformed JSON"}
	probUnauthorized    = problemType{"urn:vigil:problem:unauthorized", "Unauthorized"}
	probForbidden       = problemType{"urn:vigil:problem:forbidden", "Forbidden"}
	probNotFound        = problemType{"urn:vigil:problem:not-found", "Not found"}
	probMethod          = problemType{"urn:vigil:problem:method-not-allowed", "Method not allowed"}
	probConflict        = problemType{"urn:vigil:problem:conflict", "Conflict"}
	probIDConflict      = problemType{"urn:vigil:problem:id-conflict", "Decision id already used with another body"}
	probPrecondition    = problemType{"urn:vigil:problem:version-mismatch", "Ruleset version mismatch"}
	probTooLarge        = problemType{"urn:vigil:problem:body-too-large", "Request body too large"}
	probRulesetTooLarge = problemType{"urn:vigil:problem:ruleset-too-large", "Ruleset too large to store"}
	probMediaType       = problemType{"urn:vigil:problem:unsupported-media-type", "Unsupported media type"}
	probInvalidRuleset  = problemType{"urn:vigil:problem:invalid-ruleset", "Invalid ruleset document"}
	probPreconditionReq = problemType{"urn:vigil:problem:if-match-required", "If-Match required"}
	probSaturated       = problemType{"urn:vigil:problem:saturated", "Saturated"}
	probInternal        = problemType{"urn:vigil:problem:internal", "Internal server error"}
	probUnavailable     = problemType{"urn:vigil:problem:unavailable", "Service unavailable"}
	probNotOwner        = problemType{"urn:vigil:problem:not-owner", "Another instance owns this key"}
	probBadEvent        = problemType{"urn:vigil:problem:bad-event", "Event cannot be decided"}
)

// problem is an RFC 9457 problem document with Vigil's extension members.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	// Errors lists every mistake of a ruleset document (422).
	Errors []documentError `json:"errors,omitempty"`
	// CurrentVersion is the ruleset's version when an If-Match failed (412).
	CurrentVersion *int64 `json:"current_version,omitempty"`
	// MaxBytes is the limit a 413 exceeded: the body's, or the rules
	// topic's for a version's record.
	MaxBytes *int64 `json:"max_bytes,omitempty"`
}

// documentError is one rules.CompileError as the API shows it.
type documentError struct {
	Path    string `json:"path"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
	Snippet string `json:"snippet,omitempty"`
}

func documentErrors(list rules.ErrorList) []documentError {
	out := make([]documentError, 0, len(list))
	for _, e := range list {
		msg := "invalid"
		if e.Err != nil {
			msg = e.Err.Error()
		}
		out = append(out, documentError{Path: e.Path, Line: e.Line, Column: e.Column, Message: msg, Snippet: e.Snippet})
	}
	return out
}

// asErrorList extracts the document errors from err, if it holds any.
func asErrorList(err error) (rules.ErrorList, bool) {
	var list rules.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return list, true
	}
	var one *rules.CompileError
	if errors.As(err, &one) {
		return rules.ErrorList{one}, true
	}
	return nil, false
}

func (h *Handler) problem(w http.ResponseWriter, r *http.Request, status int, t problemType, detail string) {
	h.writeProblem(w, r, &problem{Type: t.uri, Title: t.title, Status: status, Detail: detail})
}

func (h *Handler) writeProblem(w http.ResponseWriter, r *http.Request, p *problem) {
	p.Instance = r.URL.Path
	p.RequestID = requestID(r.Context())
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: the fields are strings and numbers
		body = []byte(`{"type":"urn:vigil:problem:internal","title":"Internal server error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// invalidDocument answers 422 with every error of a document.
func (h *Handler) invalidDocument(w http.ResponseWriter, r *http.Request, list rules.ErrorList) {
	detail := "the document has 1 error"
	if len(list) != 1 {
		detail = "the document has " + strconv.Itoa(len(list)) + " errors"
	}
	h.writeProblem(w, r, &problem{
		Type: probInvalidRuleset.uri, Title: probInvalidRuleset.title,
		Status: http.StatusUnprocessableEntity, Detail: detail, Errors: documentErrors(list),
	})
}

// backendError answers for an error of a Backend call; what names the call
// for the log and the detail of a 500.
func (h *Handler) backendError(w http.ResponseWriter, r *http.Request, what string, err error) {
	if list, ok := asErrorList(err); ok {
		h.invalidDocument(w, r, list)
		return
	}
	if tl := (*service.TooLargeError)(nil); errors.As(err, &tl) {
		p := &problem{Type: probRulesetTooLarge.uri, Title: probRulesetTooLarge.title,
			Status: http.StatusRequestEntityTooLarge, Detail: tl.Error()}
		if tl.Limit > 0 {
			p.MaxBytes = &tl.Limit
		}
		h.writeProblem(w, r, p)
		return
	}
	switch {
	case errors.Is(err, service.ErrNotFound):
		h.problem(w, r, http.StatusNotFound, probNotFound, what+": not found")
	case errors.Is(err, service.ErrVersionConflict):
		// Another version was published between the If-Match check and
		// this one: answer as that check would have, naming the version
		// to retry on.
		if cur, cerr := h.b.Ruleset(r.Context()); cerr == nil && cur != nil {
			n := cur.Number
			w.Header().Set("ETag", etag(n))
			h.writeProblem(w, r, &problem{Type: probPrecondition.uri, Title: probPrecondition.title, Status: http.StatusPreconditionFailed,
				Detail:         fmt.Sprintf("the ruleset changed concurrently: version %d is current; read it again and retry with its ETag", n),
				CurrentVersion: &n})
			return
		}
		h.problem(w, r, http.StatusPreconditionFailed, probPrecondition, "the ruleset changed concurrently; read it again and retry with its ETag")
	case errors.Is(err, service.ErrIDConflict):
		h.problem(w, r, http.StatusConflict, probIDConflict, "this id was already decided with another body")
	case errors.Is(err, service.ErrBadEvent):
		h.problem(w, r, http.StatusUnprocessableEntity, probBadEvent, err.Error())
	case errors.Is(err, service.ErrSaturated):
		w.Header().Set("Retry-After", h.retryAfter)
		h.problem(w, r, http.StatusTooManyRequests, probSaturated, "the task that owns this key is saturated; retry after "+h.retryAfter+"s")
	case errors.Is(err, service.ErrNotOwner):
		w.Header().Set("Retry-After", h.retryAfter)
		h.problem(w, r, http.StatusServiceUnavailable, probNotOwner, "another instance owns this key's partition; retry (through the load balancer) after "+h.retryAfter+"s")
	case errors.Is(err, service.ErrUnavailable):
		h.problem(w, r, http.StatusServiceUnavailable, probUnavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		h.problem(w, r, http.StatusServiceUnavailable, probUnavailable, what+": timed out")
	case r.Context().Err() != nil:
		// The client went away or its deadline passed: nobody reads this.
		h.problem(w, r, http.StatusServiceUnavailable, probUnavailable, what+": request canceled")
	default:
		h.log.ErrorContext(r.Context(), "backend call failed", "call", what, "err", err, "request_id", requestID(r.Context()))
		h.problem(w, r, http.StatusInternalServerError, probInternal, what+" failed; the log has the cause (request id "+requestID(r.Context())+")")
	}
}
