package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"
)

func TestAvailable(t *testing.T) {
	const meminfo = "MemTotal:       24683652 kB\nMemFree:         1000 kB\n"
	const total = 24683652 << 10
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no cgroup: the machine", map[string]string{"proc/meminfo": meminfo}, total},
		{"nothing readable", map[string]string{}, 0},
		{"v2 limit in the group", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "2147483648\n",
		}, 2 << 30},
		{"v2 as a container sees it: the root", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1073741824\n",
		}, 1 << 30},
		{"v2 max: the machine", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n",
		}, total},
		{"v1 with no limit (this machine)", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "5:devices:/\n4:memory:/process_api/x\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, total},
		{"v1 limit, controllers listed together", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:cpu,memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n",
		}, 512 << 20},
		{"a limit above the machine's memory: the machine", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "107374182400\n",
		}, total},
		{"garbage: ignored", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "junk\n0::/\n", "sys/fs/cgroup/memory.max": "lots\n",
		}, total},
	} {
		fsys := fstest.MapFS{}
		for name, data := range c.files {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		if got := available(fsys); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestMemoryLimit: without GOMEMLIMIT, the soft limit is three quarters of
// the memory the process may use, and restore puts back the one before;
// with it, GOMEMLIMIT's stays.
func TestMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	avail := Available()
	if avail < 1<<20 {
		t.Fatalf("Available() = %d bytes: neither a cgroup limit nor /proc/meminfo read", avail)
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	restore := MemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != avail/4*3 {
		t.Errorf("memory limit %d, want %d", got, avail/4*3)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("after restore: %d, want the limit before", got)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(12345 << 20)
	MemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 12345<<20 {
		t.Errorf("with GOMEMLIMIT set, the limit moved to %d", got)
	}
}

// TestGCPercent: GOGC wins over the command's setting.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	restore := GCPercent(ServeGOGC)
	if got := debug.SetGCPercent(ServeGOGC); got != ServeGOGC {
		t.Errorf("GOGC %d, want %d", got, ServeGOGC)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after restore: %d, want 100", got)
	}
	t.Setenv("GOGC", "50")
	GCPercent(ServeGOGC)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the percentage moved to %d", got)
	}
}

func TestLimitFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ live, floor, ceiling, want int64 }{
		{live: 10 * mib, floor: 512 * mib, ceiling: 8192 * mib, want: 512 * mib},
		{live: 1000 * mib, floor: 512 * mib, ceiling: 8192 * mib, want: 1900 * mib},
		{live: 1000*mib + 3, floor: 512 * mib, ceiling: 8192 * mib, want: 1900 * mib},
		{live: 6000 * mib, floor: 512 * mib, ceiling: 8192 * mib, want: 8192 * mib},
	} {
		if got := limitFor(c.live, 1.9, c.floor, c.ceiling); got != c.want {
			t.Errorf("limitFor(%d MiB): %d MiB, want %d", c.live/mib, got/mib, c.want/mib)
		}
	}
}

func TestLowerNoFaster(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                    string
		cur, target, held, want int64
	}{
		{"a rise at once", 512 * mib, 1900 * mib, 3000 * mib, 1900 * mib},
		{"a fall to the target when little is held", 1900 * mib, 600 * mib, 400 * mib, 600 * mib},
		{"a fall stops at what is held", 1900 * mib, 600 * mib, 1500 * mib, 1500 * mib},
		{"what is held, rounded up", 1900 * mib, 600 * mib, 1500*mib + 1, 1501 * mib},
		{"never above the limit in force", 1900 * mib, 600 * mib, 2500 * mib, 1900 * mib},
		{"held unknown", 1900 * mib, 600 * mib, 0, 600 * mib},
	} {
		if got := lowerNoFaster(c.cur, c.target, c.held); got != c.want {
			t.Errorf("%s: lowerNoFaster(%d, %d, %d MiB) = %d MiB, want %d", c.name,
				c.cur/mib, c.target/mib, c.held/mib, got/mib, c.want/mib)
		}
	}
	for _, c := range []struct {
		target, held int64
		want         bool
	}{
		{512 * mib, 560 * mib, false}, // less than 64 MiB more
		{512 * mib, 700 * mib, true},
		{1000 * mib, 1200 * mib, false}, // less than a quarter more
		{1000 * mib, 1300 * mib, true},
	} {
		if got := returnWorth(c.target, c.held); got != c.want {
			t.Errorf("returnWorth(%d, %d MiB) = %v", c.target/mib, c.held/mib, got)
		}
	}
	if heldMemory() <= 0 {
		t.Error("heldMemory: the runtime's metrics gave nothing")
	}
}

// ballast is TestHeapLimit's live heap.
var ballast []byte

// TestHeapLimit: the limit follows the live heap up and down between the
// floor and the limit before, which it puts back when stopped. (It comes
// down only as the memory is returned to the system: lowerNoFaster; the
// service's harness measures the returns, docs/performance.md.)
func TestHeapLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	const mib = 1 << 20
	before := debug.SetMemoryLimit(4096 * mib)
	defer debug.SetMemoryLimit(before)
	stop := HeapLimit(2, 16*mib)
	waitLimit := func(what string, ok func(int64) bool) {
		t.Helper()
		for i := 0; ; i++ {
			runtime.GC()
			l := debug.SetMemoryLimit(-1)
			if ok(l) {
				return
			}
			if i == 400 {
				t.Fatalf("%s: the limit is %d MiB", what, l/mib)
			}
			time.Sleep(heapPoll / 5)
		}
	}
	ballast = make([]byte, 128*mib)
	for i := range ballast {
		ballast[i] = 1 // touched: live and resident
	}
	waitLimit("with 128 MiB live", func(l int64) bool { return l >= 256*mib && l < 320*mib })
	ballast = nil
	waitLimit("with the ballast gone", func(l int64) bool { return l < 64*mib })
	stop()
	if got := debug.SetMemoryLimit(-1); got != 4096*mib {
		t.Errorf("after stop: %d MiB, want the limit before (4096)", got/mib)
	}
}

func TestPause(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(ServeGOGC))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	t.Setenv("GOGC", "")
	percent := func() int {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	first := Pause()
	second := Pause()
	if got := percent(); got != -1 {
		t.Fatalf("paused: GOGC %d, want -1 (off)", got)
	}
	if l := debug.SetMemoryLimit(-1); Available() > 0 && l != Available()/4*3 {
		t.Errorf("paused without a limit: limit %d, want %d", l, Available()/4*3)
	}
	first()
	first() // a second call of the same resume changes nothing
	if got := percent(); got != -1 {
		t.Fatalf("one of two pauses resumed: GOGC %d, want still off", got)
	}
	second()
	if got := percent(); got != ServeGOGC {
		t.Errorf("resumed: GOGC %d, want %d", got, ServeGOGC)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("resumed: limit %d, want none again", l)
	}
	t.Setenv("GOGC", "50")
	Pause()()
	if got := percent(); got != ServeGOGC {
		t.Errorf("with GOGC set, Pause moved it to %d", got)
	}
}

// TestPauseWithHeapLimit: a pause holds the limit at HeapLimit's ceiling, so
// that a restore is not collected against the live heap from before it, and
// HeapLimit takes the limit back once the pause ends.
func TestPauseWithHeapLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	const mib = 1 << 20
	defer debug.SetGCPercent(debug.SetGCPercent(ServeGOGC))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(4096 * mib))
	synctest.Test(t, func(t *testing.T) {
		stop := HeapLimit(2, 16*mib)
		defer stop()
		// settle lets HeapLimit poll a few times after a collection.
		settle := func() int64 {
			runtime.GC()
			time.Sleep(3 * heapPoll)
			synctest.Wait()
			return debug.SetMemoryLimit(-1)
		}
		if l := settle(); l >= 256*mib {
			t.Fatalf("before the pause: the limit is %d MiB, want HeapLimit's (under 256)", l/mib)
		}
		resume := Pause()
		if l := settle(); l != 4096*mib {
			t.Fatalf("paused: the limit is %d MiB, want HeapLimit's ceiling (4096)", l/mib)
		}
		resume()
		if l := settle(); l >= 256*mib {
			t.Fatalf("resumed: the limit is %d MiB, want HeapLimit's again (under 256)", l/mib)
		}
	})
	if l := debug.SetMemoryLimit(-1); l != 4096*mib {
		t.Errorf("after stop: %d MiB, want the limit before (4096)", l/mib)
	}
}

// TestServe: vigil serve's settings, undone by restore. Without a ratio,
// GOGC at ServeGOGC; with one, the heap limit in force at once and GOGC
// off, the limit pacing the collector alone; with GOMEMLIMIT set, which
// HeapLimit leaves alone, GOGC at ServeGOGC again, so that the heap is
// never unbounded.
func TestServe(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, c := range []struct {
		ratio      float64
		gomemlimit string
		gogc       int
		limited    bool
	}{
		{ratio: 0, gogc: ServeGOGC},
		{ratio: ServeHeapRatio, gogc: -1, limited: true},
		{ratio: ServeHeapRatio, gomemlimit: "1GiB", gogc: ServeGOGC},
	} {
		t.Setenv("GOMEMLIMIT", c.gomemlimit)
		restore := Serve(c.ratio)
		got := debug.SetGCPercent(-1)
		debug.SetGCPercent(got)
		if got != c.gogc {
			t.Errorf("Serve(%g), GOMEMLIMIT %q: GOGC %d, want %d", c.ratio, c.gomemlimit, got, c.gogc)
		}
		ctl.Lock()
		limited := ctl.ceiling > 0
		ctl.Unlock()
		if limited != c.limited {
			t.Errorf("Serve(%g), GOMEMLIMIT %q: heap limit on: %v", c.ratio, c.gomemlimit, limited)
		}
		if l := debug.SetMemoryLimit(-1); c.limited && l == math.MaxInt64 {
			t.Errorf("Serve(%g): GOGC off with no limit in force", c.ratio)
		}
		restore()
		if got := debug.SetGCPercent(100); got != 100 || ctl.ceiling != 0 {
			t.Errorf("Serve(%g) restored: GOGC %d, heap limit ceiling %d; want 100 and none", c.ratio, got, ctl.ceiling)
		}
		if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
			t.Errorf("Serve(%g) restored: limit %d, want none", c.ratio, l)
		}
	}
}

// sink keeps what the reads of TestReclaim allocate on the heap.
var sink [][]byte

func TestReclaim(t *testing.T) {
	read := func(n int) { // garbage: n MiB, dropped at once
		for range n {
			sink = append(sink[:0], make([]byte, 1<<20))
		}
		sink = nil
	}
	collects := func(reads Reads, kept int64) bool {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		did := reads.Reclaim(kept)
		runtime.ReadMemStats(&after)
		if collected := after.NumGC > before.NumGC; did && !collected {
			t.Fatal("Reclaim reported a collection that did not run")
		}
		return did
	}

	runtime.GC()
	reads := StartReads()
	kept := make([]byte, 4<<20)
	read(64)
	if !collects(reads, int64(len(kept))) {
		t.Error("a small heap after reads that left 64 MiB of garbage: no collection")
	}

	reads = StartReads()
	kept = make([]byte, 32<<20)
	if collects(reads, int64(len(kept))) {
		t.Error("reads that kept all they allocated: a collection")
	}

	held := make([]byte, 128<<20)
	runtime.GC()
	reads = StartReads()
	read(32)
	if collects(reads, 0) {
		t.Error("32 MiB of garbage beside a 128 MiB live heap: a collection")
	}
	runtime.KeepAlive(held)

	t.Setenv("GOGC", "200") // the environment chose: as Pause, nothing
	runtime.GC()
	reads = StartReads()
	read(64)
	if collects(reads, 0) {
		t.Error("GOGC set: a collection")
	}
	runtime.KeepAlive(kept)
}
