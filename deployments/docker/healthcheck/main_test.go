package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	tests := []struct {
		name      string
		args      []string
		vigilHTTP string
		healthy   bool
		code      int
		stderr    string
	}{
		{"URL", []string{srv.URL + "/healthz"}, "", true, 0, ""},
		{"port from VIGIL_HTTP", nil, "0.0.0.0:" + port, true, 0, ""},
		{"unhealthy", nil, "0.0.0.0:" + port, false, 1, "503 Service Unavailable"},
		{"wrong path", []string{srv.URL + "/nothing"}, "", true, 1, "503 Service Unavailable"},
		{"nothing listening", []string{"http://127.0.0.1:1/healthz"}, "", true, 1, "connection refused"},
		{"usage", []string{"a", "b"}, "", true, 2, "usage: healthcheck"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			healthy.Store(tt.healthy)
			var stderr bytes.Buffer
			code := run(tt.args, tt.vigilHTTP, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d, stderr with %q", code, stderr.String(), tt.code, tt.stderr)
			}
		})
	}
}

func TestDefaultURL(t *testing.T) {
	for addr, want := range map[string]string{
		"":             "http://127.0.0.1:8080/healthz",
		"0.0.0.0:9000": "http://127.0.0.1:9000/healthz",
		":8081":        "http://127.0.0.1:8081/healthz",
		"[::]:8082":    "http://127.0.0.1:8082/healthz",
		"garbage":      "http://127.0.0.1:8080/healthz",
	} {
		if got := defaultURL(addr); got != want {
			t.Errorf("defaultURL(%q) = %q, want %q", addr, got, want)
		}
	}
}
