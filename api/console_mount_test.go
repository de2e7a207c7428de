package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConsoleMount: Options.Console is served open under /console/, with
// the request id, access log and panic recovery of every route, and
// /console redirects there; without it /console/ is an API 404.
func TestConsoleMount(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console/boom" {
			panic("console: asked to panic")
		}
		_, _ = w.Write([]byte("page " + r.URL.Path))
	})
	f := newFixture(t, func(o *Options) { o.Console = console })
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil)) // not an API exchange: openapi.json does not list it
		return rec
	}
	for _, path := range []string{"/console/", "/console/rules", "/console/static/console.js"} {
		rec := serve(path)
		if rec.Code != http.StatusOK || rec.Body.String() != "page "+path || rec.Header().Get("X-Request-ID") == "" {
			t.Errorf("GET %s: %d %q %v", path, rec.Code, rec.Body, rec.Header())
		}
	}
	if rec := serve("/console"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/" {
		t.Errorf("GET /console: %d %v", rec.Code, rec.Header())
	}
	mustProblem(t, serve("/console/boom"), http.StatusInternalServerError, probInternal)
	if !strings.Contains(f.logs.String(), `"route":"/console/*"`) {
		t.Errorf("no access log line with the console's route pattern:\n%s", f.logs)
	}
	// The API beside it is unchanged.
	mustProblem(t, f.do(req{path: "/v1/ruleset", token: "-"}), http.StatusUnauthorized, probUnauthorized)

	g := newFixture(t)
	mustProblem(t, g.do(req{path: "/console/"}), http.StatusNotFound, probNotFound)
}
