package main

import (
	"runtime/debug"
	"testing"

	"github.com/vigil-cep/vigil/internal/memlimit"
)

// TestMemoryLimit: without GOMEMLIMIT, the soft limit is three quarters of
// the memory the process may use; with it, GOMEMLIMIT's.
func TestMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	avail := memlimit.Available()
	if avail < 1<<20 {
		t.Fatalf("memlimit.Available() = %d bytes: neither a cgroup limit nor /proc/meminfo read", avail)
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != avail/4*3 {
		t.Errorf("memory limit %d, want %d", got, avail/4*3)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(12345 << 20)
	setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 12345<<20 {
		t.Errorf("with GOMEMLIMIT set, the limit moved to %d", got)
	}
}
