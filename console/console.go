package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed templates/*.html static/*
var assets embed.FS

// page is one page of the console.
type page struct {
	Name   string // its path under /console/ ("" for the overview)
	Title  string
	Script string // its own script under static/, after console.js
	Nav    bool   // listed in the navigation bar
	Needs  string // the API permission the page needs (api's roles matrix); its link is left out without it
}

// pages lists the console's pages in the order of the navigation bar.
var pages = []page{
	{Name: "", Title: "Overview", Script: "overview.js", Nav: true, Needs: "metrics:read"},
	{Name: "rules", Title: "Rules", Script: "rules.js", Nav: true, Needs: "rules:read"},
	{Name: "backtest", Title: "Backtest", Script: "backtest.js", Nav: true, Needs: "rules:test"},
	{Name: "decisions", Title: "Decisions", Script: "decisions.js", Nav: true, Needs: "decisions:read"},
	{Name: "entities", Title: "Entities", Script: "entities.js", Nav: true, Needs: "entities:read"},
	{Name: "signin", Title: "Sign in", Script: "signin.js"},
}

// Headers of every response: the pages run only their own scripts, talk
// only to their own origin, and are framed by no one (see the package
// documentation, "Security model").
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves the console under /console/. It is immutable after New
// and safe for concurrent use.
type Handler struct {
	pages  map[string][]byte // rendered pages by name
	static map[string]asset  // by file name under static/
}

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// New renders the pages and indexes the assets. It fails only if the
// embedded templates are broken (a build mistake).
func New() (*Handler, error) {
	h := &Handler{pages: map[string][]byte{}, static: map[string]asset{}}
	files, err := fs.ReadDir(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for _, f := range files {
		body, err := assets.ReadFile("static/" + f.Name())
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(f.Name()))
		switch path.Ext(f.Name()) { // not left to the system's MIME tables
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		h.static[f.Name()] = asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	layout, err := template.ParseFS(assets, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for _, p := range pages {
		name := p.Name
		if name == "" {
			name = "overview"
		}
		t, err := layout.Clone()
		if err == nil {
			t, err = t.ParseFS(assets, "templates/"+name+".html")
		}
		if err != nil {
			return nil, fmt.Errorf("console: page %s: %w", name, err)
		}
		var buf bytes.Buffer
		data := struct {
			Page    page
			Pages   []page
			Version func(file string) string
		}{p, pages, func(file string) string { return strings.Trim(h.static[file].etag, `"`) }}
		if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
			return nil, fmt.Errorf("console: page %s: %w", name, err)
		}
		h.pages[p.Name] = buf.Bytes()
	}
	return h, nil
}

// ServeHTTP serves a page or an asset; the request path is /console/…
// whatever the handler is mounted under (api.Options.Console).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "the console only serves pages: GET", http.StatusMethodNotAllowed)
		return
	}
	_, rest, _ := strings.Cut(r.URL.Path, "/console/")
	if file, ok := strings.CutPrefix(rest, "static/"); ok {
		a, ok := h.static[file]
		if !ok {
			http.NotFound(w, r)
			return
		}
		hd.Set("ETag", a.etag)
		if r.Header.Get("If-None-Match") == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.write(w, r, a.ctype, a.body)
		return
	}
	body, ok := h.pages[rest]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.write(w, r, "text/html; charset=utf-8", body)
}

func (h *Handler) write(w http.ResponseWriter, r *http.Request, ctype string, body []byte) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
