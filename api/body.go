package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// format is how a request body is written.
type format int

const (
	formatJSON format = iota
	formatYAML
)

// accepts says which body formats an endpoint takes.
type accepts int

const (
	jsonOnly    accepts = iota // events, backtests, rollbacks
	jsonOrYAML                 // documents and items
	maxComment  = 1000
	defaultPage = 20
	maxPage     = 100
)

// bodyFormat reads the Content-Type. A missing one means JSON on JSON
// endpoints and "either" (YAML reads JSON too) where documents are taken.
func bodyFormat(r *http.Request, a accepts) (format, bool) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if a == jsonOrYAML {
			return formatYAML, true
		}
		return formatJSON, true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, false
	}
	switch {
	case mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return formatJSON, true
	case a == jsonOrYAML && (mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml" || mt == "text/x-yaml"):
		return formatYAML, true
	}
	return 0, false
}

// readBody reads a request body of at most limit bytes in a format a takes.
// On failure it has answered (413, 415, 400) and returns false.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, limit int64, a accepts) ([]byte, format, bool) {
	f, ok := bodyFormat(r, a)
	if !ok {
		want := "application/json"
		if a == jsonOrYAML {
			want = "application/json or application/yaml"
		}
		h.problem(w, r, http.StatusUnsupportedMediaType, probMediaType, fmt.Sprintf("Content-Type %q is not accepted here; send %s", r.Header.Get("Content-Type"), want))
		return nil, 0, false
	}
	if r.ContentLength > limit {
		h.tooLarge(w, r, limit)
		return nil, 0, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.tooLarge(w, r, limit)
		} else {
			h.problem(w, r, http.StatusBadRequest, probBadRequest, "reading the body: "+err.Error())
		}
		return nil, 0, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, "the body is empty")
		return nil, 0, false
	}
	return body, f, true
}

func (h *Handler) tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	w.Header().Set("Connection", "close") // do not read the rest of a huge body
	h.writeProblem(w, r, &problem{Type: probTooLarge.uri, Title: probTooLarge.title, Status: http.StatusRequestEntityTooLarge,
		Detail: fmt.Sprintf("the body is larger than %d bytes", limit), MaxBytes: &limit})
}

// jsonObjectStart reports whether body's first non-space byte opens an object.
func jsonObjectStart(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// malformedJSON describes a JSON syntax error with its line and column.
func malformedJSON(body []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes read, the offending one included; at
		// the end of the input, point past the last byte.
		at := se.Offset - 1
		if se.Error() == "unexpected end of JSON input" {
			at = int64(len(body))
		}
		line, col := lineCol(body, at)
		return fmt.Sprintf("line %d, column %d: %v", line, col, se)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		line, col := lineCol(body, te.Offset)
		return fmt.Sprintf("line %d, column %d: %v", line, col, te)
	}
	return err.Error()
}

func lineCol(body []byte, offset int64) (int, int) {
	offset = min(max(offset, 0), int64(len(body)))
	prefix := body[:offset]
	line := bytes.Count(prefix, []byte("\n")) + 1
	col := int(offset) - (bytes.LastIndexByte(prefix, '\n') + 1) + 1
	return line, col
}

// decodeJSON decodes exactly one JSON value into v (numbers as
// json.Number into interfaces); strict refuses unknown fields.
func decodeJSON(body []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// decodeStrict decodes a JSON body into v, refusing unknown fields and
// trailing data; on failure it has answered 400.
func (h *Handler) decodeStrict(w http.ResponseWriter, r *http.Request, body []byte, v any) bool {
	if err := decodeJSON(body, v, true); err != nil {
		h.problem(w, r, http.StatusBadRequest, probMalformedJSON, malformedJSON(body, err))
		return false
	}
	return true
}

// writeJSON writes v as JSON without HTML escaping (expressions keep their
// '<' and '&').
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only values built by this package reach here, all encodable.
		panic(fmt.Sprintf("api: encode response: %v", err))
	}
	writeBody(w, status, buf.Bytes())
}

// writeBody answers with b, a JSON value and its newline.
func writeBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// pathParam returns a URL parameter, unescaped: chi matches the escaped
// path (routeEscapedPath), so every parameter, "%2F" in a key included,
// is decoded here and only here.
func pathParam(r *http.Request, name string) (string, bool) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	return v, err == nil && v != ""
}

// query returns the first value of the query parameter name, as
// r.URL.Query().Get(name) does, without building the map of every
// parameter that it builds and drops (the decision API reads ?stream= on
// every request). Unlike url.ParseQuery it reads a query with more
// parameters than url's limit too: each pair costs a scan, nothing more.
func query(r *http.Request, name string) string {
	for q := r.URL.RawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if strings.Contains(pair, ";") {
			continue // url.ParseQuery refuses the pair
		}
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		}
		if !strings.ContainsAny(v, "%+") {
			return v
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			return uv
		}
	}
	return ""
}

// intQuery reads an optional integer query parameter in [lo, hi]; def when
// absent. On failure it has answered 400.
func (h *Handler) intQuery(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int64) (int64, bool) {
	s := query(r, name)
	if s == "" {
		return def, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("query parameter %s must be an integer in [%d, %d], not %q", name, lo, hi, s))
		return 0, false
	}
	return n, true
}

// wantsYAML reports whether the Accept header prefers YAML to JSON: the
// first listed type that is either decides (q-values are not weighed).
func wantsYAML(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
			return true
		case "application/json", "application/problem+json":
			return false
		}
	}
	return false
}

// etag formats a ruleset version as an entity tag.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch is a parsed If-Match header.
type ifMatch struct {
	any      bool    // "*"
	versions []int64 // the listed versions that are numbers
}

func (m ifMatch) matches(version int64) bool {
	if m.any {
		return true
	}
	for _, v := range m.versions {
		if v == version {
			return true
		}
	}
	return false
}

// requireIfMatch parses If-Match; without one it has answered 428.
func (h *Handler) requireIfMatch(w http.ResponseWriter, r *http.Request) (ifMatch, bool) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		h.problem(w, r, http.StatusPreconditionRequired, probPreconditionReq,
			`writes need If-Match with the ETag of the version they change, e.g. If-Match: "7" (read it with GET; "0" when no version exists yet)`)
		return ifMatch{}, false
	}
	var m ifMatch
	for _, v := range vals {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
			if tag == "*" {
				m.any = true
				continue
			}
			if n, err := strconv.ParseInt(strings.Trim(tag, `"`), 10, 64); err == nil {
				m.versions = append(m.versions, n)
			}
		}
	}
	return m, true
}

// comment reads the optional ?comment= of a change (the audit log's why).
func (h *Handler) comment(w http.ResponseWriter, r *http.Request) (string, bool) {
	c := query(r, "comment")
	if len(c) > maxComment {
		h.problem(w, r, http.StatusBadRequest, probBadRequest, fmt.Sprintf("comment is longer than %d bytes", maxComment))
		return "", false
	}
	return c, true
}
