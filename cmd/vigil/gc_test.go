package main

import (
	"runtime/debug"
	"testing"
)

// TestReplayMemoryLimit: without GOMEMLIMIT, replay's soft limit is three
// quarters of the machine's memory.
func TestReplayMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	total := memTotal()
	if total < 1<<20 {
		t.Fatalf("MemTotal = %d bytes: /proc/meminfo not read", total)
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	setReplayMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != total/4*3 {
		t.Errorf("memory limit %d, want %d", got, total/4*3)
	}
}
