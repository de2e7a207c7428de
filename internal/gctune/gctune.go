// Package gctune holds the collector settings Vigil's commands run at, in
// one place for vigil and vigil-bench (whose phases must run as vigil serve
// and vigil replay do), and applies them unless the environment chose its
// own (GOGC, GOMEMLIMIT).
//
// The live heap of both commands is the retained state (history, windows,
// ids), which the collector marks at every cycle: a lazier collector saves a
// large share of the CPU for memory. A soft memory limit, derived from what
// the process may use (its container's limit, or the machine's memory),
// makes the collector work harder as the heap nears it instead of the
// process being killed, with no GOMEMLIMIT to keep in step with a pod's
// limit.
package gctune

import (
	"bufio"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Collector percentages (GOGC).
const (
	// ServeGOGC is vigil serve's without a heap limit (--heap-ratio 0, or
	// GOMEMLIMIT set): a service's heap must stay predictable.
	ServeGOGC = 400
	// ReplayGOGC is vigil replay's, a batch job: on the 1M workload it
	// saves about a fifth of the CPU against 400, at the same peak RSS
	// (docs/performance.md).
	ReplayGOGC = 800
)

// Serve sets the collector as vigil serve runs it, for vigil serve and for
// vigil-bench's phases that must run as it does. With a ratio, the soft
// memory limit alone paces the collector: HeapLimit(ratio, ServeHeapFloor)
// with GOGC off, so that a small state is collected when the heap reaches
// the floor rather than five times the state (at 5,000 decisions/s, a
// cycle every 4 s instead of every 1.5 s, 2-8% less CPU per decision and a
// shorter tail; docs/performance.md), and a large one at ratio times it, as
// before. With ratio 0, or GOMEMLIMIT set (HeapLimit then leaves the limit
// alone), GOGC at ServeGOGC. Call it after MemoryLimit, whose limit is
// HeapLimit's ceiling. restore puts back what was before.
func Serve(ratio float64) (restore func()) {
	if ratio == 0 || os.Getenv("GOMEMLIMIT") != "" {
		return GCPercent(ServeGOGC)
	}
	stop := HeapLimit(ratio, ServeHeapFloor) // the limit is in force when it returns
	restoreGC := GCPercent(-1)
	return func() {
		restoreGC()
		stop()
	}
}

// gogcSet reports whether the environment chose the collector's percentage
// (GOGC), which the settings here then leave alone.
func gogcSet() bool { return os.Getenv("GOGC") != "" }

// GCPercent sets the collector's percentage unless GOGC is set; restore puts
// back the one before.
func GCPercent(percent int) (restore func()) {
	if gogcSet() {
		return func() {}
	}
	old := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(old) }
}

// Pause turns the collector off until every Pause's resume has been called,
// unless GOGC is set: for a phase that allocates only state that stays live,
// as a restore does, where each cycle marks a growing heap for nothing (1M
// keys over four tasks restored in 8.0 s with the collector at GOGC 400, in
// 4.6 s without; docs/performance.md). The soft memory limit still holds,
// and the collector runs as it must near it; a process without one gets
// MemoryLimit's for the pause, so that nothing grows unbounded. While
// HeapLimit runs, the pause holds the limit at HeapLimit's ceiling: a limit
// proportional to the live heap before a restore would collect the state
// the restore builds several times over. Pauses may overlap (tasks restored
// by two rebalances at once).
func Pause() (resume func()) {
	if gogcSet() {
		return func() {}
	}
	ctl.Lock()
	defer ctl.Unlock()
	if ctl.pauses == 0 {
		ctl.percent = debug.SetGCPercent(-1)
		ctl.limit = debug.SetMemoryLimit(-1)
		if ctl.ceiling > 0 {
			debug.SetMemoryLimit(ctl.ceiling)
		} else if avail := Available(); ctl.limit == math.MaxInt64 && avail > 0 {
			debug.SetMemoryLimit(avail / 4 * 3)
		}
	}
	ctl.pauses++
	var once sync.Once
	return func() {
		once.Do(func() {
			ctl.Lock()
			defer ctl.Unlock()
			if ctl.pauses--; ctl.pauses == 0 {
				debug.SetMemoryLimit(ctl.limit)
				debug.SetGCPercent(ctl.percent)
			}
		})
	}
}

// Reads samples the heap before the reads of a restore's first half, for
// Reclaim after them. A restore has two halves: the reads of the
// checkpoint chains, which leave garbage behind (fetch buffers and
// decompressed batches: on the Kafka store about five times the chains'
// size), and the decodes, which run under Pause and allocate the state.
type Reads struct {
	live   int64 // the live heap as the last collection found it
	allocs int64 // bytes allocated so far
}

// StartReads samples the heap before a restore's reads.
func StartReads() Reads {
	live, allocs := heapSample()
	return Reads{live: live, allocs: allocs}
}

// Reclaim runs one collection after a restore's reads, which kept kept
// bytes (the chains), when the garbage they left is more than the
// collection must mark (the live heap before them and what they kept), and
// reports whether it did. Collected, that garbage's pages, already faulted
// in, are what the decodes reuse instead of fresh pages the kernel must
// fault and zero one by one, much of a restore's cost on a virtual machine
// (docs/performance.md). A process restarting collects; one with a large
// state taking over a task does not, and the reads of the dir store leave
// little garbage. As Pause, it does nothing when GOGC is set.
func (r Reads) Reclaim(kept int64) bool {
	if gogcSet() {
		return false
	}
	_, allocs := heapSample()
	if garbage := allocs - r.allocs - kept; garbage <= r.live+kept {
		return false
	}
	runtime.GC()
	return true
}

// heapSample returns the live heap as the last collection found it (0
// before the first) and the bytes allocated so far.
func heapSample() (live, allocs int64) {
	v := readBytes("/gc/heap/live:bytes", "/gc/heap/allocs:bytes")
	return v[0], v[1]
}

// readBytes reads the runtime's metrics of these names, each 0 where the
// runtime has none of that name.
func readBytes(names ...string) []int64 {
	sample := make([]metrics.Sample, len(names))
	for i, name := range names {
		sample[i].Name = name
	}
	metrics.Read(sample)
	v := make([]int64, len(names))
	for i, s := range sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	return v
}

// ctl is what Pause and HeapLimit share: the settings from before the
// pauses, while pauses are on, and HeapLimit's ceiling while it runs.
var ctl struct {
	sync.Mutex
	pauses  int
	percent int   // GOGC before the first pause
	limit   int64 // the soft memory limit before the first pause
	ceiling int64 // HeapLimit's, while it runs; 0 when it does not
}

// MemoryLimit sets a soft memory limit of three quarters of Available unless
// GOMEMLIMIT is set or the size is unknown; restore puts back the one before.
// With a lazy collector the heap may grow to several times the live state,
// and near the limit the collector runs as often as it must instead. The
// last quarter is for what the limit's goal holds less tightly (stacks,
// fragmentation) and for the page cache of the checkpoint files.
func MemoryLimit() (restore func()) {
	avail := Available()
	if os.Getenv("GOMEMLIMIT") != "" || avail <= 0 {
		return func() {}
	}
	old := debug.SetMemoryLimit(avail / 4 * 3)
	return func() { debug.SetMemoryLimit(old) }
}

// Available returns the memory this process may use, in bytes: the lowest of
// its control group's limit and the machine's memory; 0 when neither can be
// read (not Linux).
func Available() int64 { return available(os.DirFS("/")) }

// noLimit is where a limit stops meaning anything: cgroup v1 writes "no
// limit" as the largest page-aligned int64.
const noLimit = 1 << 62

// available is Available over a file system rooted at "/".
func available(fsys fs.FS) int64 {
	total := memTotal(fsys)
	if l := cgroupLimit(fsys); l > 0 && (total == 0 || l < total) {
		return l
	}
	return total
}

// cgroupLimit returns the memory limit of the process's control group, 0
// when it has none or it cannot be read. It looks where the process's
// /proc/self/cgroup says its group is and, since a container sees its own
// group as the root of the hierarchy, at the root too.
func cgroupLimit(fsys fs.FS) int64 {
	f, err := fsys.Open("proc/self/cgroup")
	if err != nil {
		return 0
	}
	defer f.Close()
	var files []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := strings.TrimPrefix(parts[2], "/")
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			files = append(files, path.Join("sys/fs/cgroup", dir, "memory.max"), "sys/fs/cgroup/memory.max")
		case hasController(parts[1], "memory"): // cgroup v1
			files = append(files, path.Join("sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	var limit int64
	for _, name := range files {
		if l := readLimit(fsys, name); l > 0 && (limit == 0 || l < limit) {
			limit = l
		}
	}
	return limit
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a limit file: a byte count, or "max" (none); 0 for none.
func readLimit(fsys fs.FS, name string) int64 {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= noLimit {
		return 0
	}
	return n
}

// memTotal returns MemTotal from /proc/meminfo in bytes, or 0.
func memTotal(fsys fs.FS) int64 {
	f, err := fsys.Open("proc/meminfo")
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

// Heap-proportional limit (HeapLimit).
const (
	// ServeHeapRatio is vigil serve's default --heap-ratio: RSS under twice
	// the state. At 1M users it held RSS at 1.7-1.8 times the live heap
	// instead of 3.7-3.8, for a collection every few seconds under load
	// instead of every half minute, and so a longer decision tail
	// (docs/design.md "Memory").
	ServeHeapRatio = 1.9
	// ServeHeapFloor is vigil serve's floor of HeapLimit (--heap-ratio): a
	// small state is collected when the heap reaches it, for the CPU that
	// collecting less often saves.
	ServeHeapFloor = 512 << 20
	// heapPoll is how often HeapLimit reads the live heap.
	heapPoll = 250 * time.Millisecond
)

// HeapLimit keeps the soft memory limit at ratio times the live heap of the
// last collection, but at least floor and at most the limit in force when it
// starts (MemoryLimit's), unless GOMEMLIMIT is set; stop ends it and puts
// back that limit; the first limit is in force when it returns. A fixed
// GOGC lets the heap grow to 1+GOGC/100 times the live state, which is
// cheap in CPU while the state is small and several gigabytes of memory
// when it is large; with the limit the collector runs as GOGC 100 would
// once the state is large, and under the floor the heap may grow to the
// floor. The limit moves with the live heap, so it never holds the
// collector to a heap the state has outgrown (the death spiral of a fixed
// limit set too low). While a Pause is on, it leaves the limit to the pause.
//
// It is vigil serve's --heap-ratio (ServeHeapRatio by default): see there
// for what it costs.
func HeapLimit(ratio float64, floor int64) (stop func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	ctl.Lock()
	ceiling := debug.SetMemoryLimit(-1)
	if ctl.pauses > 0 {
		ceiling = ctl.limit // the pause's own limit is not the one to keep
	}
	ctl.ceiling = ceiling
	ctl.Unlock()
	// follow sets the limit for the live heap, and reports whether the
	// process holds much more memory than that limit (see returnWorth).
	follow := func() (excess bool) {
		live, _ := heapSample()
		target := limitFor(live, ratio, floor, ceiling)
		held := heldMemory()
		ctl.Lock()
		defer ctl.Unlock()
		if ctl.pauses > 0 {
			return false
		}
		cur := debug.SetMemoryLimit(-1)
		if l := lowerNoFaster(cur, target, held); l != cur {
			debug.SetMemoryLimit(l)
		}
		return returnWorth(target, held)
	}
	follow() // before it returns: Serve turns GOGC off under this limit
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(heapPoll)
		defer tick.Stop()
		var returned time.Time
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if follow() && time.Since(returned) >= returnEvery {
				// On this goroutine: requests go on meanwhile, and
				// the next poll lowers the limit to what is left.
				debug.FreeOSMemory()
				returned = time.Now()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		ctl.Lock()
		defer ctl.Unlock()
		ctl.ceiling = 0
		if ctl.pauses > 0 {
			ctl.limit = ceiling // what the last resume puts back
			return
		}
		debug.SetMemoryLimit(ceiling)
	}
}

// lowerNoFaster is the limit to set in place of cur when the live heap
// calls for target and the runtime holds held bytes from the system
// (mapped, not returned): target when it is higher, but not lower than
// held, nor than cur. A limit under what is held leaves the collector no
// room: its heap goal falls to the live heap, and it collects back to back
// until the scavenger has returned the difference to the system. That
// happened when a large state shrank at once (its keys froze at 1M users:
// 20 collections in 1.3 s, every allocation waiting on them;
// docs/performance.md). At held, the scavenger, which keeps the process
// under 95% of the limit, returns memory in the background (and HeapLimit
// all at once when it is worth it: returnWorth), and each poll lowers the
// limit to what is left: the limit comes down as fast as memory is
// returned, and no faster.
func lowerNoFaster(cur, target, held int64) int64 {
	if target >= cur {
		return target
	}
	return max(target, min(cur, roundMiB(held+1<<20-1)))
}

// returnWorth reports whether the process holds enough memory beyond the
// limit its live heap calls for (target) to return it to the system at
// once: more than a quarter more, and at least 64 MiB. The runtime's
// background scavenger returns memory at a pace of 1% of the CPU, which
// after 1M keys froze left RSS at 2.5 times the live heap 50 s later;
// debug.FreeOSMemory returns it in a collection and a pass over the free
// pages, on HeapLimit's goroutine, at most every returnEvery.
func returnWorth(target, held int64) bool {
	return held-target > max(target/4, 64<<20)
}

// returnEvery is how often HeapLimit returns memory at most: a collection
// each time, which a shrinking state needs once, not at every poll.
const returnEvery = 30 * time.Second

// heldMemory returns the bytes the runtime holds from the system, which
// its soft memory limit bounds: all it has mapped but what the heap has
// returned.
func heldMemory() int64 {
	v := readBytes("/memory/classes/total:bytes", "/memory/classes/heap/released:bytes")
	return v[0] - v[1] // 0 when the runtime has neither
}

// roundMiB rounds n down to a mebibyte.
func roundMiB(n int64) int64 { return n &^ (1<<20 - 1) }

// limitFor is the limit for a live heap: ratio times it, between floor and
// ceiling, rounded to a mebibyte so that small changes of the live heap do
// not move it.
func limitFor(live int64, ratio float64, floor, ceiling int64) int64 {
	l := roundMiB(max(int64(float64(live)*ratio), floor))
	return min(l, ceiling)
}
