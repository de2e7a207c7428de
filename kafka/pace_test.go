package kafka

import (
	"testing"
	"time"
)

// TestNextDuty: the duty halves while many waits for a CPU are long, down
// to minDuty, and grows a step at a time while few are, up to all of the
// time; no waits read is no contention.
func TestNextDuty(t *testing.T) {
	for _, tc := range []struct {
		name        string
		duty        float64
		waits, slow uint64
		want        float64
	}{
		{"contended halves", 1, 100, 30, 0.5},
		{"at the threshold is not contended", 0.5, 100, 5, 0.5 + dutyStep},
		{"just above it is", 0.5, 1000, 51, 0.25},
		{"never below the least", minDuty, 100, 100, minDuty},
		{"free grows a step", 0.25, 100, 1, 0.25 + dutyStep},
		{"never above all", 1, 100, 0, 1},
		{"no waits read", 0.25, 0, 0, 0.25 + dutyStep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextDuty(tc.duty, tc.waits, tc.slow); got != tc.want {
				t.Fatalf("nextDuty(%v, %d, %d) = %v, want %v", tc.duty, tc.waits, tc.slow, got, tc.want)
			}
		})
	}
}

// TestPauseAfter: a slice and the pause after it take the time of which
// the slice is duty.
func TestPauseAfter(t *testing.T) {
	for _, tc := range []struct {
		took time.Duration
		duty float64
		want time.Duration
	}{
		{500 * time.Microsecond, 1, 0},
		{500 * time.Microsecond, 0.5, 500 * time.Microsecond},
		{500 * time.Microsecond, 1.0 / 64, 63 * 500 * time.Microsecond},
		{0, 0.25, 0},
	} {
		if got := pauseAfter(tc.took, tc.duty); got != tc.want {
			t.Errorf("pauseAfter(%v, %v) = %v, want %v", tc.took, tc.duty, got, tc.want)
		}
	}
}

// TestPacerReads: the pacer reads the runtime's waits for a CPU, and
// starts with no pacing.
func TestPacerReads(t *testing.T) {
	p := newPacer()
	if d := p.Duty(); d != 1 {
		t.Fatalf("first duty %v, want 1", d)
	}
	if p.slowFrom <= 0 || p.slowFrom >= len(p.prev) {
		t.Fatalf("no bucket of waits of %v or more: %d of %d", paceSlow, p.slowFrom, len(p.prev))
	}
}
