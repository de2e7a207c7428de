package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-cep/vigil/service"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The API tests hold every exchange to openapi.json: newFixture's handler
// and the real-service servers are wrapped in openAPIChecked, so that each
// request a test sends and each response it gets are validated by
// kin-openapi's openapi3filter against the document the API serves.

// openAPISpec is openapi.json loaded, validated and routed, once for all
// tests. It is safe for concurrent use (read only).
type openAPISpec struct {
	doc    *openapi3.T
	router routers.Router
}

var loadOpenAPI = sync.OnceValues(func() (*openAPISpec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI 3.0 document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.json: %w", err)
	}
	return &openAPISpec{doc: doc, router: router}, nil
})

func mustOpenAPI(t testing.TB) *openAPISpec {
	t.Helper()
	s, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openAPIChecked wraps h so that every exchange it serves is checked
// (checkExchange); a mismatch fails t. The response reaches the client
// unchanged, once the handler has finished.
func openAPIChecked(t testing.TB, h *Handler) http.Handler {
	s := mustOpenAPI(t)
	return s.checked(func(err error) { t.Errorf("OpenAPI: %v", err) }, h, h)
}

// checked serves next and reports each exchange that does not match the
// document; h says how the API is configured (NoAuth).
func (s *openAPISpec) checked(report func(error), h *Handler, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			report(fmt.Errorf("%s %s: read the request body: %v", r.Method, r.URL, err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if err := s.checkExchange(r.Context(), h, r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			report(fmt.Errorf("%s %s answered %d %.400s\n%v", r.Method, r.URL, rec.Code, rec.Body, err))
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// checkExchange holds one request and its response to the document:
//
//   - a request that no operation takes must be answered 404 or 405, with
//     a problem;
//   - a request the document refuses must not succeed: a 2xx would mean
//     the document is stricter than the API. (A request it allows may still
//     fail: 404, 409, 412, 422 depend on the data.) A body is validated as
//     the format the API reads it as: JSON for application/json, +json
//     types and no Content-Type on JSON-only routes, YAML for the YAML
//     aliases;
//   - the response's status must be one the operation lists, 500 excepted
//     (default), and its headers and body must match that response.
func (s *openAPISpec) checkExchange(ctx context.Context, h *Handler, r *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	vr := r.Clone(ctx)
	vr.Body = io.NopCloser(bytes.NewReader(reqBody))
	vr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	route, params, err := s.router.FindRoute(vr)
	if err != nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("no operation of the document takes it (%v), yet the API answered %d", err, status)
		}
		return s.validateBody("Problem", header, body, "application/problem+json")
	}
	// The router matches the escaped path and leaves its parameters
	// escaped; the API decodes each once (pathParam), and so does this.
	for k, v := range params {
		if u, err := url.PathUnescape(v); err == nil {
			params[k] = u
		}
	}
	if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil {
		a := jsonOnly
		if rb.Value.Content.Get("application/yaml") != nil {
			a = jsonOrYAML
		}
		if f, ok := bodyFormat(r, a); ok {
			vr.Header.Set("Content-Type", map[format]string{formatJSON: "application/json", formatYAML: "application/yaml"}[f])
		}
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    vr,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			SkipSettingDefaults: true,
			AuthenticationFunc: func(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
				if h.noAuth {
					return nil
				}
				hdr := ai.RequestValidationInput.Request.Header
				if ai.SecuritySchemeName == "peerSignature" {
					if hdr.Get(hdrPeerSignature) == "" {
						return errors.New("no peer signature")
					}
					return nil
				}
				// RFC 9110: the scheme is case-insensitive.
				scheme, tok, _ := strings.Cut(hdr.Get("Authorization"), " ")
				if ai.SecuritySchemeName != "bearerAuth" || !strings.EqualFold(scheme, "Bearer") || tok == "" {
					return errors.New("no bearer token")
				}
				return nil
			},
		},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && status < 300 {
		return fmt.Errorf("the document refuses this request, yet the API answered %d: %v", status, err)
	}

	resp := route.Operation.Responses.Status(status)
	if resp == nil && status != http.StatusInternalServerError {
		return fmt.Errorf("operation %s does not list status %d", route.Operation.OperationID, status)
	}
	if resp != nil && resp.Value != nil && len(resp.Value.Content) == 0 && len(body) > 0 {
		return fmt.Errorf("operation %s: status %d has no content, the API sent %d bytes", route.Operation.OperationID, status, len(body))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("operation %s, response %d: %v", route.Operation.OperationID, status, err)
	}
	return nil
}

// validateBody checks a response body against a component schema, and its
// Content-Type.
func (s *openAPISpec) validateBody(schema string, header http.Header, body []byte, ctype string) error {
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != ctype {
		return fmt.Errorf("Content-Type %q, want %s", header.Get("Content-Type"), ctype)
	}
	return s.validateJSON(schema, body)
}

// validateJSON checks a JSON value against a component schema.
func (s *openAPISpec) validateJSON(schema string, data []byte) error {
	ref := s.doc.Components.Schemas[schema]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("no schema %s", schema)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("%s: %v", schema, err)
	}
	if err := ref.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("%s: %v", schema, err)
	}
	return nil
}

// TestOpenAPICheckBites: the check that every test runs fails a response
// that strays from the document, one way or another, and a request the
// document refuses that the API would accept; the untouched exchange
// passes.
func TestOpenAPICheckBites(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	s := mustOpenAPI(t)
	decide := func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/decisions", strings.NewReader(`{"tx_id":"b1","user_id":"u1","amount":500,"ts":1}`))
		r.Header.Set("Authorization", "Bearer "+tokDecider)
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	// rewrite serves the request and changes the response body.
	rewrite := func(edit func(body []byte) []byte) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(edit(rec.Body.Bytes()))
		})
	}
	replace := func(old, new string) func([]byte) []byte {
		return func(b []byte) []byte {
			if !bytes.Contains(b, []byte(old)) {
				t.Fatalf("%q is not in %s", old, b)
			}
			return bytes.ReplaceAll(b, []byte(old), []byte(new))
		}
	}
	for _, tc := range []struct {
		name    string
		handler http.Handler
		req     func() *http.Request
		want    string // in the error; "" for none
	}{
		{"as served", f.h, decide, ""},
		{"an action that does not exist", rewrite(replace(`"action":"block"`, `"action":"deny"`)), decide, `"deny"`},
		{"a required field dropped", rewrite(replace(`"stream":"transactions",`, ``)), decide, `"stream"`},
		{"a field the record does not have", rewrite(replace(`"kind":"decision",`, `"kind":"decision","verdict":"no",`)), decide, `"verdict"`},
		{"a score that is a string", rewrite(replace(`"score":10,`, `"score":"10",`)), decide, `score`},
		{"a status the operation does not list", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.h.problem(w, r, http.StatusTeapot, probBadRequest, "short and stout")
		}), decide, "does not list status 418"},
		{"a problem with a type it cannot have", rewrite(replace(`urn:vigil:problem:unauthorized`, `urn:vigil:problem:forbidden`)), func() *http.Request {
			r := decide()
			r.Header.Del("Authorization")
			return r
		}, "urn:vigil:problem:forbidden"},
		{"a request the document refuses, accepted", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, service.Decision{Record: json.RawMessage(`{"kind":"decision","id":"x","stream":"s","key":"k","time":1,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]}`)})
		}), func() *http.Request {
			r := decide()
			r.Body = io.NopCloser(strings.NewReader(`["not", "an", "object"]`))
			return r
		}, "the document refuses this request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []error
			s.checked(func(err error) { got = append(got, err) }, f.h, tc.handler).ServeHTTP(httptest.NewRecorder(), tc.req())
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("the exchange as served fails the check: %v", got)
			case tc.want != "" && len(got) == 0:
				t.Errorf("the check let it pass")
			case tc.want != "" && !strings.Contains(fmt.Sprint(got), tc.want):
				t.Errorf("the check failed, but not naming %s: %v", tc.want, got)
			}
		})
	}
}
