package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/vigil-cep/vigil/service"
)

// Request routing (docs/design.md "Request routing"): a decision or an
// entity read for a key that another instance of the group owns is
// forwarded to it, so that any instance (behind any load balancer) answers
// any key. The caller's API key is checked once, here at the edge; the
// forwarded request carries the caller's name and role, signed with the
// group's peer secret, and the owner checks the signature in place of a
// key. A forwarded request is never forwarded again: an owner whose view is
// stale answers 503 with Retry-After, and the caller retries.

// Peers configures forwarding between the instances of a group.
type Peers struct {
	// Secret signs forwarded requests; every instance of the group has the
	// same one, of at least MinPeerSecretBytes. Without it (and with API
	// keys) nothing is forwarded: a request for another instance's key is
	// answered 503, as before.
	Secret []byte
	// Client makes the forwarded requests; nil: one with a 2 s dial timeout
	// (the request's own deadline bounds the rest).
	Client *http.Client
	// OnForward, when set, is told of every forwarded request: its route
	// pattern, "ok" when the owner answered (whatever its status) or
	// "unavailable", and the round trip.
	OnForward func(route, outcome string, d time.Duration)
}

// MinPeerSecretBytes is the shortest peer secret New accepts.
const MinPeerSecretBytes = 32

// The headers of a forwarded request.
const (
	hdrPeerCaller    = "Vigil-Peer-Caller"    // name:role of the key the edge checked
	hdrPeerTime      = "Vigil-Peer-Time"      // Unix milliseconds when it was signed
	hdrPeerSignature = "Vigil-Peer-Signature" // HMAC-SHA256 of the request, base64
	hdrForwardedTo   = "Vigil-Forwarded-To"   // on the answer: the owner that made it
)

// peerClockSkew bounds how old (or how far ahead) a signature may be: a
// captured forwarded request cannot be replayed later than this.
const peerClockSkew = time.Minute

// forwardBodyLimit bounds the answer read back from the owner.
const forwardBodyLimit = 16 << 20

// peerSignature signs what a forwarded request asks: its method, path and
// query, the caller, the time, and its body.
func peerSignature(secret []byte, method, uri, caller, at string, body []byte) string {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%x", method, uri, caller, at, sum)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// forwarded reports whether r came from a peer (it carries a signature).
func forwarded(r *http.Request) bool { return r.Header.Get(hdrPeerSignature) != "" }

// peerKey checks the signature of a forwarded request and returns the
// caller it vouches for. The body is read and put back.
func (h *Handler) peerKey(r *http.Request) (Key, error) {
	if h.peers == nil || len(h.peers.Secret) == 0 {
		return Key{}, errors.New("this instance takes no forwarded requests (no peer secret)")
	}
	at := r.Header.Get(hdrPeerTime)
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return Key{}, errors.New("malformed " + hdrPeerTime)
	}
	if skew := time.Since(time.UnixMilli(ms)); skew > peerClockSkew || skew < -peerClockSkew {
		return Key{}, fmt.Errorf("the forwarded request was signed %s ago (at most %s)", skew.Round(time.Millisecond), peerClockSkew)
	}
	var body []byte
	if r.Body != nil {
		if body, err = io.ReadAll(io.LimitReader(r.Body, h.maxBacktest+1)); err != nil {
			return Key{}, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	caller := r.Header.Get(hdrPeerCaller)
	want := peerSignature(h.peers.Secret, r.Method, r.URL.RequestURI(), caller, at, body)
	if !hmac.Equal([]byte(want), []byte(r.Header.Get(hdrPeerSignature))) {
		return Key{}, errors.New("the peer signature does not match (is the peer secret the same on every instance?)")
	}
	name, role, ok := strings.Cut(caller, ":")
	if !ok || !Role(role).Valid() {
		return Key{}, errors.New("malformed " + hdrPeerCaller)
	}
	return Key{Name: name, Role: Role(role)}, nil
}

// canForward reports whether a request that failed with err should go to
// the owner instead, and to which address.
func (h *Handler) canForward(r *http.Request, err error) (string, bool) {
	var no *service.NotOwnerError
	if !errors.As(err, &no) || no.Owner == "" || forwarded(r) {
		return "", false
	}
	return no.Owner, h.noAuth || h.peers != nil && len(h.peers.Secret) > 0
}

// forward sends r (with body) to the owner's API and copies its answer.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, owner string, body []byte) {
	start := time.Now()
	route := r.Method + " " + r.URL.Path
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		route = r.Method + " " + rc.RoutePattern()
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+owner+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		h.backendError(w, r, "forward", err)
		return
	}
	for _, k := range []string{"Content-Type", "Accept"} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	// One request id across both instances' logs and the answer.
	req.Header.Set("X-Request-ID", RequestID(r.Context()))
	if h.peers != nil && len(h.peers.Secret) > 0 {
		k := caller(r.Context())
		who := k.Name + ":" + string(k.Role)
		at := strconv.FormatInt(time.Now().UnixMilli(), 10)
		req.Header.Set(hdrPeerCaller, who)
		req.Header.Set(hdrPeerTime, at)
		req.Header.Set(hdrPeerSignature, peerSignature(h.peers.Secret, req.Method, r.URL.RequestURI(), who, at, body))
	} else {
		req.Header.Set(hdrPeerSignature, "none") // marks it forwarded: never again
	}
	resp, err := h.peerClient().Do(req)
	if err != nil {
		h.onForward(route, "unavailable", time.Since(start))
		w.Header().Set("Retry-After", h.retryAfter)
		h.problem(w, r, http.StatusServiceUnavailable, probNotOwner,
			fmt.Sprintf("the instance that owns this key (%s) did not answer: %v; retry after %ss", owner, unwrapURLError(err), h.retryAfter))
		return
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Idempotent-Replay", "Retry-After", "ETag", "WWW-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.Header().Set(hdrForwardedTo, owner)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, forwardBodyLimit))
	h.onForward(route, "ok", time.Since(start))
}

func (h *Handler) onForward(route, outcome string, d time.Duration) {
	if h.peers != nil && h.peers.OnForward != nil {
		h.peers.OnForward(route, outcome, d)
	}
}

func (h *Handler) peerClient() *http.Client {
	if h.peers != nil && h.peers.Client != nil {
		return h.peers.Client
	}
	return defaultPeerClient
}

// defaultPeerClient dials quickly; the request's deadline bounds the rest.
var defaultPeerClient = &http.Client{Transport: &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     90 * time.Second,
}}

// unwrapURLError drops net/http's "Post \"http://…\":" prefix.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("no answer before the request's deadline")
	}
	return err
}
