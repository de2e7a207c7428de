package kafka

import (
	"runtime/metrics"
	"sync"
	"time"
)

// Background work yields (docs/design.md "Background work yields"). Between
// requests and batches a task works in slices (stepCut): it fires the
// windows an advance left overdue, encodes a cut's records, thaws and
// freezes keys. After a jump of the watermark over an hour's end the slices
// are seconds of work at a million keys, and their records seconds more
// for the producer and the broker. Go's scheduler has no priorities: given
// the CPU they take, the decision requests queue behind them and wait for
// seconds. So a task paces its slices by how long the process's goroutines
// wait for a CPU, which the runtime measures (/sched/latencies:seconds):
// while many wait long the tasks take a smaller share of their time for
// slices, halving it each time (down to minDuty), and while few do they
// take more, a step at a time, up to all of it on an idle machine.

const (
	// paceEvery is how often the waits are read, and the duty changed.
	paceEvery = 20 * time.Millisecond
	// paceSlow is a wait for a CPU that a decision request notices.
	paceSlow = time.Millisecond
	// paceContended is the share of waits at least paceSlow above which
	// the CPU counts as contended. Under a steady load that takes most of
	// two cores, 1–2% of waits are that long; under a burst of slices,
	// 20–40%.
	paceContended = 0.05
	// minDuty is the least share of its time a task gives to its slices, so
	// that overdue windows, and the checkpoints that wait for them, still
	// come while the CPU is contended: a slice of cutSlice every 4 ms. With
	// 1/64 a backlog of frozen keys at 1M users outlasted a 20 s load: the
	// keys its requests thawed could not freeze again (freezing waits for
	// the backlog), and the collector ran back to back (docs/performance.md).
	minDuty = 1.0 / 8
	// dutyStep is how much the duty grows each paceEvery without contention:
	// from minDuty to all of the time in about 0.6 s.
	dutyStep = 1.0 / 32
)

// pacer is a process's measure of its tasks' duty: the share of a task's
// time that its slices may take. The tasks share it.
type pacer struct {
	mu       sync.Mutex
	at       time.Time // the last reading
	sample   []metrics.Sample
	prev     []uint64 // the histogram's counts at the last reading
	slowFrom int      // the first bucket whose waits are at least paceSlow
	duty     float64
}

func newPacer() *pacer {
	return &pacer{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}, duty: 1}
}

// Duty returns the share of its time a task's slices may take now. It reads
// the runtime's histogram when paceEvery has passed since the last reading.
func (p *pacer) Duty() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.at) < paceEvery {
		return p.duty
	}
	p.at = now
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 1 // a runtime without the metric: no pacing
	}
	h := p.sample[0].Value.Float64Histogram()
	first := p.prev == nil
	if first {
		p.prev = make([]uint64, len(h.Counts))
		p.slowFrom = len(h.Counts)
		for i := range h.Counts {
			if h.Buckets[i] >= paceSlow.Seconds() {
				p.slowFrom = i
				break
			}
		}
	}
	var waits, slow uint64
	for i, c := range h.Counts {
		d := c - p.prev[i]
		p.prev[i] = c
		waits += d
		if i >= p.slowFrom {
			slow += d
		}
	}
	if !first { // the first counts are the process's whole life
		p.duty = nextDuty(p.duty, waits, slow)
	}
	return p.duty
}

// nextDuty is the duty after a reading of waits waits for a CPU, slow of
// them at least paceSlow: halved while the CPU is contended, else a step
// more.
func nextDuty(duty float64, waits, slow uint64) float64 {
	if waits > 0 && float64(slow) > paceContended*float64(waits) {
		return max(minDuty, duty/2)
	}
	return min(1, duty+dutyStep)
}

// pauseAfter is how long a task waits after a slice that took took before
// it starts the next one, for its slices to take duty of its time.
func pauseAfter(took time.Duration, duty float64) time.Duration {
	if duty >= 1 {
		return 0
	}
	return time.Duration(float64(took) * (1/duty - 1))
}
