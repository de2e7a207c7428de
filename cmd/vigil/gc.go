package main

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Collector settings. The live heap of both commands is the retained state
// (history, windows, ids), which the collector marks at every cycle: a lazier
// collector saves a large share of the CPU for memory. GOGC and GOMEMLIMIT,
// when set, win.
const (
	// serveGOGC is vigil serve's: a service's heap must stay predictable
	// (GOMEMLIMIT, set by the deployments, caps it).
	serveGOGC = 400
	// replayGOGC is vigil replay's, a batch job: on the 1M workload it saves
	// about a fifth of the CPU against 400, at the same peak RSS (README,
	// Performance), and a soft memory limit (replayMemoryLimit) makes the
	// collector work harder before a large replay runs out of memory.
	replayGOGC = 800
)

// setGOGC sets the collector's percentage unless GOGC is set.
func setGOGC(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}

// setReplayMemoryLimit sets a soft memory limit of three quarters of the
// machine's memory unless GOMEMLIMIT is set or the size is unknown: with
// replayGOGC the heap may grow to nine times the live state, and near the
// limit the collector runs as often as it must instead.
func setReplayMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if total := memTotal(); total > 0 {
		debug.SetMemoryLimit(total / 4 * 3)
	}
}

// memTotal returns MemTotal from /proc/meminfo in bytes, or 0.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
