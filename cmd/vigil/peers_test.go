package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestAdvertiseAddr(t *testing.T) {
	for _, tt := range []struct{ flag, listening, want, err string }{
		{"", "127.0.0.1:8080", "127.0.0.1:8080", ""},
		{"", "0.0.0.0:8080", "", ""},
		{"", "[::]:8080", "", ""},
		{"vigil-0.vigil-headless.default.svc:8080", "0.0.0.0:8080", "vigil-0.vigil-headless.default.svc:8080", ""},
		{"vigil-0", "0.0.0.0:8080", "", `--advertise-http "vigil-0": want host:port: address vigil-0: missing port in address`},
	} {
		addr, _ := net.ResolveTCPAddr("tcp", tt.listening)
		got, err := advertiseAddr(tt.flag, addr)
		if got != tt.want || fmt.Sprint(err) != tt.err && !(err == nil && tt.err == "") {
			t.Errorf("advertiseAddr(%q, %s) = %q, %v; want %q, %s", tt.flag, tt.listening, got, err, tt.want, tt.err)
		}
	}
}

func TestPeerSecret(t *testing.T) {
	t.Setenv(peerSecretEnv, "")
	if s, err := peerSecret(""); s != nil || err != nil {
		t.Errorf("none: %q, %v", s, err)
	}
	t.Setenv(peerSecretEnv, "short")
	if _, err := peerSecret(""); fmt.Sprint(err) != "the peer secret has 5 bytes, fewer than 32 (e.g. openssl rand -hex 32)" {
		t.Errorf("short: %v", err)
	}
	file := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(file, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	if s, err := peerSecret(file); string(s) != "0123456789abcdef0123456789abcdef" || err != nil {
		t.Errorf("file (it wins over the variable): %q, %v", s, err)
	}
}
