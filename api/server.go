package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes     = 1 << 20  // 1 MiB
	DefaultMaxBacktestBytes = 16 << 20 // 16 MiB: backtests carry NDJSON events
	DefaultRetryAfter       = time.Second
	DefaultBacktestTimeout  = 5 * time.Minute
	DefaultRequestTimeout   = 5 * time.Second
)

// Options configures New. The zero value is not usable on its own: it has
// no keys; set Keys, or NoAuth for local development.
type Options struct {
	// Keys are the accepted API keys (LoadKeys, ParseKeyList).
	Keys []Key
	// NoAuth serves every request without a token, as an admin named
	// "anonymous". For a laptop only; New refuses Keys and NoAuth together.
	NoAuth bool
	// MaxBodyBytes bounds every request body except backtests'; larger
	// bodies get 413. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxBacktestBytes bounds POST /v1/rules:backtest bodies, which may
	// carry events. Default DefaultMaxBacktestBytes.
	MaxBacktestBytes int64
	// BacktestTimeout bounds a backtest: its context's deadline, and the
	// response write deadline is pushed back to it. Default
	// DefaultBacktestTimeout.
	BacktestTimeout time.Duration
	// RequestTimeout bounds every other request: its context's deadline, so
	// that a request waiting on a stuck task answers 503 problem+json
	// instead of hanging (docs/design.md, "Rule safety"). Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// RetryAfter is the Retry-After of 429 and 503 answers to decisions.
	// Default DefaultRetryAfter; rounded up to whole seconds.
	RetryAfter time.Duration
	// Logger receives access logs (Info; Error for 5xx; Debug for the
	// routes served at the rate of transactions or probes: decisions,
	// entities, /healthz, /readyz, /metrics), recovered panics and backend
	// failures. Default slog.Default().
	Logger *slog.Logger
	// Middleware, when set, wraps every request (metrics, tracing). It runs
	// inside the router, after the request id is set (RequestID) and inside
	// panic recovery, before authentication; once next returns,
	// chi.RouteContext(r.Context()).RoutePattern() is the matched route
	// pattern (low cardinality: "/v1/rules/{id}").
	Middleware func(http.Handler) http.Handler
	// Peers, when set, forwards a request for a key another instance owns
	// to it (forward.go); nil answers such requests 503.
	Peers *Peers
	// Metrics, when set, is served at GET /metrics (a Prometheus handler).
	Metrics http.Handler
	// MetricsAuth makes /metrics need a key with the reader, analyst or
	// admin role. By default /metrics is open, as Prometheus scrapers
	// usually expect on the service port; keep the port off the internet
	// or set this.
	MetricsAuth bool
	// Console, when set, is served open at /console/ (and /console
	// redirects there): the analyst console's pages and assets, which hold
	// no data; the API calls they make carry the signed-in key. It is no
	// part of the API: openapi.json does not list it.
	Console http.Handler
}

// Validate checks o and reports every problem at once. Errors never quote
// a token.
func (o *Options) Validate() error {
	var errs []error
	switch {
	case o.NoAuth && len(o.Keys) > 0:
		errs = append(errs, errors.New("api: NoAuth and Keys are both set"))
	case !o.NoAuth && len(o.Keys) == 0:
		errs = append(errs, errors.New("api: no API keys (set Keys, e.g. from "+KeysEnv+", or NoAuth for local development)"))
	}
	if err := validateKeys(o.Keys); err != nil {
		errs = append(errs, fmt.Errorf("api: %w", err))
	}
	if o.Peers != nil && len(o.Peers.Secret) > 0 && len(o.Peers.Secret) < MinPeerSecretBytes {
		errs = append(errs, fmt.Errorf("api: the peer secret has %d bytes, fewer than %d", len(o.Peers.Secret), MinPeerSecretBytes))
	}
	if o.MaxBodyBytes < 0 || o.MaxBacktestBytes < 0 || o.BacktestTimeout < 0 || o.RequestTimeout < 0 || o.RetryAfter < 0 {
		errs = append(errs, errors.New("api: negative limit"))
	}
	return errors.Join(errs...)
}

// Handler serves the HTTP API (see the package documentation for routes).
// It is safe for concurrent use; it keeps no state besides caches of
// immutable ruleset versions.
type Handler struct {
	b               Backend
	log             *slog.Logger
	keys            *keyring
	noAuth          bool
	maxBody         int64
	maxBacktest     int64
	backtestTimeout time.Duration
	requestTimeout  time.Duration
	retryAfter      string // whole seconds
	kinds           []rulesdoc.Kind
	mux             *chi.Mux
	routes          []route

	deciding atomic.Pointer[decidingStreams] // of the latest version seen
	index    versionCache
	peers    *Peers // forwarding to the owner of a key (forward.go); nil: none
}

// New returns the API over b. It fails when opts is invalid (see
// Options.Validate).
func New(b Backend, opts Options) (*Handler, error) {
	if b == nil {
		return nil, errors.New("api: nil Backend")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{
		b:               b,
		log:             opts.Logger,
		keys:            newKeyring(opts.Keys),
		noAuth:          opts.NoAuth,
		maxBody:         cmpOr(opts.MaxBodyBytes, DefaultMaxBodyBytes),
		maxBacktest:     cmpOr(opts.MaxBacktestBytes, DefaultMaxBacktestBytes),
		backtestTimeout: cmpOr(opts.BacktestTimeout, DefaultBacktestTimeout),
		requestTimeout:  cmpOr(opts.RequestTimeout, DefaultRequestTimeout),
		kinds:           rulesdoc.Kinds(),
		peers:           opts.Peers,
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	retry := cmpOr(opts.RetryAfter, DefaultRetryAfter)
	h.retryAfter = strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10)
	h.index.init(versionCacheSize)

	h.mux = chi.NewRouter()
	h.mux.Use(routeEscapedPath, h.requestContext, h.recoverPanics)
	if opts.Middleware != nil {
		h.mux.Use(opts.Middleware)
	}
	h.mux.NotFound(h.notFound)
	h.mux.MethodNotAllowed(h.methodNotAllowed)
	h.routes = h.routeTable(opts)
	for _, rt := range h.routes {
		handler := http.Handler(rt.handler)
		if rt.pattern != "/v1/rules:backtest" { // backtests have their own, longer deadline
			handler = h.deadline(handler)
		}
		h.mux.With(h.authorize(rt.perm)).Method(rt.method, rt.pattern, handler)
	}
	if opts.Console != nil {
		h.mux.Get("/console", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
		})
		h.mux.Handle("/console/*", opts.Console)
	}
	return h, nil
}

// deadline bounds a request by the request timeout: a backend call that
// waits on a stuck task returns context.DeadlineExceeded, answered as 503.
func (h *Handler) deadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.requestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func cmpOr[T int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// route is one entry of the route table: the router and the OpenAPI test
// both read it.
type route struct {
	method, pattern string
	perm            permission
	handler         http.HandlerFunc
}

func (h *Handler) routeTable(opts Options) []route {
	rs := []route{
		{http.MethodGet, "/healthz", permOpen, h.healthz},
		{http.MethodGet, "/readyz", permOpen, h.readyz},
		{http.MethodGet, "/openapi.json", permOpen, h.openAPI},

		{http.MethodGet, "/v1/ruleset", permRulesRead, h.getRuleset},
		{http.MethodPut, "/v1/ruleset", permRulesWrite, h.putRuleset},
		{http.MethodGet, "/v1/ruleset/versions", permRulesRead, h.listVersions},
		{http.MethodGet, "/v1/ruleset/versions/{n}", permRulesRead, h.getVersion},
		// Explicit static routes: /v1/rules/{id} would not take them (the
		// colon is no separator), but they must not fall to a catch-all.
		{http.MethodPost, "/v1/rules:validate", permRulesTest, h.validate},
		{http.MethodPost, "/v1/rules:backtest", permRulesTest, h.backtest},
		{http.MethodGet, "/v1/audit", permAuditRead, h.audit},

		{http.MethodGet, "/v1/me", permIdentity, h.me},

		{http.MethodGet, "/v1/decisions", permDecisionsRead, h.listDecisions},
		{http.MethodPost, "/v1/decisions", permDecide, h.postDecision},
		{http.MethodGet, "/v1/decisions/{id}", permDecisionsRead, h.getDecision},
		{http.MethodGet, "/v1/entities/{key}", permEntitiesRead, h.getEntity},
	}
	for _, k := range h.kinds {
		base := "/v1/" + k.Plural
		rs = append(rs,
			route{http.MethodGet, base, permRulesRead, h.listItems(k)},
			route{http.MethodPost, base, permRulesWrite, h.createItem(k)},
			route{http.MethodGet, base + "/{id}", permRulesRead, h.getItem(k)},
			route{http.MethodPut, base + "/{id}", permRulesWrite, h.putItem(k)},
			route{http.MethodDelete, base + "/{id}", permRulesWrite, h.deleteItem(k)},
			route{http.MethodGet, base + "/{id}/versions", permRulesRead, h.itemVersions(k)},
			route{http.MethodPost, base + "/{id}/rollback", permRulesWrite, h.rollbackItem(k)},
		)
	}
	if opts.Metrics != nil {
		p := permOpen
		if opts.MetricsAuth {
			p = permMetricsRead
		}
		rs = append(rs, route{http.MethodGet, "/metrics", p, opts.Metrics.ServeHTTP})
	}
	return rs
}

// NewServer returns an http.Server for h on addr with timeouts that cut off
// slow clients: 5 s to send the headers, 30 s for the whole request, 60 s to
// write the response (backtests push their own deadline further), 120 s
// idle, 64 KiB of headers. Adjust the fields before ListenAndServe if need
// be; stop it with Shutdown(ctx).
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// routeEscapedPath makes chi match routes against the escaped path, always.
// By itself chi matches r.URL.RawPath when net/url kept one, which it does
// only when the client escaped the path otherwise than Go would ("%2F",
// "%41"), and the decoded r.URL.Path when not: a path parameter then came
// escaped in the first case and already decoded in the second, and
// pathParam's unescaping decoded "pct%2541" twice, into "pctA". With the
// escaped path every parameter arrives escaped, "/" inside one included,
// and pathParam decodes it exactly once.
func routeEscapedPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// requestInfo is filled in as a request goes down the chain and read by the
// access log when it comes back.
type requestInfo struct {
	id     string
	caller Key // the caller's key, once authorized (authorize)
}

type requestInfoCtx struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoCtx{}).(*requestInfo)
	return info
}

// RequestID returns the id of the request ctx belongs to (the X-Request-ID
// header, echoed or generated), or "" outside a request.
func RequestID(ctx context.Context) string { return requestID(ctx) }

func requestID(ctx context.Context) string {
	if info := requestInfoFrom(ctx); info != nil {
		return info.id
	}
	return ""
}

// validRequestID accepts ids that are safe to echo and log.
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// requestContext sets the request id and writes the access log line.
func (h *Handler) requestContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-ID")
		if !validRequestID(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-ID", id)
		info := &requestInfo{id: id}
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoCtx{}, info))
		next.ServeHTTP(sw, r)

		pattern := "(unmatched)"
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePattern() != "" {
			pattern = rctx.RoutePattern()
		}
		status := sw.code()
		level := slog.LevelInfo
		switch {
		case pattern == "/readyz" && status == http.StatusServiceUnavailable:
			// Not ready is the probe's answer while the tasks restore or
			// the group rebalances, polled every few seconds: not a
			// failure to log as one.
			level = slog.LevelDebug
		case status >= 500:
			level = slog.LevelError
		case hotRoute(pattern):
			level = slog.LevelDebug
		}
		if !h.log.Enabled(r.Context(), level) {
			return
		}
		h.log.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("route", pattern),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", sw.bytes),
			slog.String("request_id", id),
			slog.String("key", info.caller.Name),
		)
	})
}

// hotRoute reports whether a route is served at the rate of transactions or
// probes (decisions, entity reads, health, metrics): its access log is at
// Debug, since a line per request cost a few percent of the decision path's
// CPU and the metrics count these requests already (docs/design.md
// "Decision API"). Authoring requests, rare and worth an audit trail, log
// at Info.
func hotRoute(pattern string) bool {
	switch {
	case pattern == "/healthz" || pattern == "/readyz" || pattern == "/metrics":
		return true
	case strings.HasPrefix(pattern, "/v1/decisions") || strings.HasPrefix(pattern, "/v1/entities"):
		return true
	}
	return false
}

// recoverPanics turns a handler panic into a 500 problem and logs it with
// its stack. http.ErrAbortHandler keeps its meaning (abort the response).
func (h *Handler) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.ErrorContext(r.Context(), "panic in HTTP handler",
				"panic", fmt.Sprint(v), "method", r.Method, "path", r.URL.Path,
				"request_id", requestID(r.Context()), "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				return // the response has begun: nothing sensible to add
			}
			h.problem(w, r, http.StatusInternalServerError, probInternal, "internal error; the log has the cause (request id "+requestID(r.Context())+")")
		}()
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (Flush,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.problem(w, r, http.StatusNotFound, probNotFound, "no such resource: "+r.Method+" "+r.URL.Path)
}

func (h *Handler) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath() // as routeEscapedPath routes
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if h.mux.Match(chi.NewRouteContext(), m, path) {
			w.Header().Add("Allow", m)
		}
	}
	h.problem(w, r, http.StatusMethodNotAllowed, probMethod, r.Method+" is not allowed on "+r.URL.Path)
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.b.Ready(r.Context()); err != nil {
		h.problem(w, r, http.StatusServiceUnavailable, probUnavailable, "not ready: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
