package main

import (
	"os"
	"runtime/debug"

	"github.com/vigil-cep/vigil/internal/memlimit"
)

// Collector settings. The live heap of both commands is the retained state
// (history, windows, ids), which the collector marks at every cycle: a lazier
// collector saves a large share of the CPU for memory. GOGC and GOMEMLIMIT,
// when set, win.
const (
	// serveGOGC is vigil serve's: a service's heap must stay predictable,
	// and the soft memory limit (setMemoryLimit) caps it.
	serveGOGC = 400
	// replayGOGC is vigil replay's, a batch job: on the 1M workload it saves
	// about a fifth of the CPU against 400, at the same peak RSS
	// (docs/performance.md), and the soft memory limit makes the collector
	// work harder before a large replay runs out of memory.
	replayGOGC = 800
)

// setGOGC sets the collector's percentage unless GOGC is set.
func setGOGC(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}

// setMemoryLimit sets a soft memory limit of three quarters of the memory the
// process may use (its container's limit, or the machine's memory:
// memlimit.Available) unless GOMEMLIMIT is set or the size is unknown: with
// a lazy collector the heap may grow to several times the live state, and
// near the limit the collector runs as often as it must instead. The last
// quarter is for what the collector does not count against the limit's
// goal as tightly (stacks, fragmentation) and for the page cache of the
// checkpoint files.
func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if avail := memlimit.Available(); avail > 0 {
		debug.SetMemoryLimit(avail / 4 * 3)
	}
}
