package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestPages: every page renders with the navigation, its title, labels
// for its inputs and its own scripts, and every response carries the
// security headers.
func TestPages(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rec := serve(t, h, "GET", "/console/"+p.Name)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("page %q: %d %v", p.Name, rec.Code, rec.Header())
		}
		body := rec.Body.String()
		for _, want := range []string{
			"<title>" + p.Title + " · Vigil console</title>",
			`<script defer src="static/console.js?v=`,
			`<script defer src="static/` + p.Script + `?v=`,
			`<main id="main" tabindex="-1">`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("page %q lacks %s", p.Name, want)
			}
		}
		if p.Nav && !strings.Contains(body, `aria-current="page">`+p.Title+`</a>`) {
			t.Errorf("page %q: the navigation does not mark it current", p.Name)
		}
		// Every input, select and textarea has a label (accessibility).
		for _, m := range regexp.MustCompile(`<(?:input|select|textarea)[^>]*\bid="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			if !strings.Contains(body, `for="`+m[1]+`"`) && !strings.Contains(m[0], "aria-label") && !strings.Contains(m[0], `type="radio"`) {
				t.Errorf("page %q: #%s has no label", p.Name, m[1])
			}
		}
		checkHeaders(t, "page "+p.Name, rec)
	}
}

func checkHeaders(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	for k, v := range map[string]string{
		"Content-Security-Policy": contentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %s %q, want %q", what, k, got, v)
		}
	}
}

// TestAssets: the scripts and the stylesheet are served with their types
// and an ETag that answers 304; unknown paths are 404; only GET and HEAD.
func TestAssets(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for file, ctype := range map[string]string{"console.js": "text/javascript; charset=utf-8", "rules.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"} {
		rec := serve(t, h, "GET", "/console/static/"+file)
		etag := rec.Header().Get("ETag")
		if rec.Code != 200 || rec.Header().Get("Content-Type") != ctype || etag == "" || rec.Body.Len() == 0 {
			t.Errorf("%s: %d %v", file, rec.Code, rec.Header())
		}
		checkHeaders(t, file, rec)
		if rec := serve(t, h, "GET", "/console/static/"+file, "If-None-Match", etag); rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
			t.Errorf("%s with its ETag: %d", file, rec.Code)
		}
	}
	if rec := serve(t, h, "HEAD", "/console/rules"); rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") == "0" {
		t.Errorf("HEAD: %d %d bytes, Content-Length %s", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
	}
	for _, path := range []string{"/console/nope", "/console/static/nope.js", "/console/static/", "/console/templates/layout.html", "/console/static/../console.go"} {
		if rec := serve(t, h, "GET", path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		if rec := serve(t, h, m, "/console/rules"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d %v", m, rec.Code, rec.Header())
		}
	}
}

// TestOffline: the console loads nothing from elsewhere, and never puts
// a value into the page as HTML (its scripts build text nodes).
func TestOffline(t *testing.T) {
	url := regexp.MustCompile(`(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(assets, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(src), "http://www.w3.org/2000/svg", "") // the SVG namespace, not a download
		if m := url.FindString(text); m != "" {
			t.Errorf("%s refers to %s: the console must work offline", path, m)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "document.cookie"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s uses %s", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
