package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPprof(t *testing.T) {
	addr, stop, err := startPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/heap?debug=1", "/debug/pprof/trace?seconds=0.1"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %s, %d bytes", path, resp.Status, len(body))
		}
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:6060", "nonsense"} {
		if _, _, err := startPprof(addr); err == nil || !strings.HasPrefix(err.Error(), "--pprof ") {
			t.Errorf("startPprof(%q): %v, want it refused", addr, err)
		}
	}
}
