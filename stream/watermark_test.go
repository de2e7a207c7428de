package stream

import "testing"

// manualClock is a processing-time clock the test moves by hand.
type manualClock struct{ now int64 }

func (c *manualClock) Now() int64 { return c.now }

// step is one action of a watermark scenario followed by the expected task watermark.
type step struct {
	op        string // "event", "raise", "raise-stream", "raise-all", "tick"
	stream    int
	partition int32
	t         int64 // event time, watermark, or clock advance for "tick"
	want      int64
}

func TestWatermarks(t *testing.T) {
	bounded := WatermarkConfig{MaxOutOfOrder: 5}
	idle := WatermarkConfig{MaxOutOfOrder: 0, IdleAfter: 100}
	tests := []struct {
		name  string
		cfg   WatermarkConfig
		steps []step
	}{
		{"bounded out-of-orderness is max - bound - 1", bounded, []step{
			{op: "event", t: 10, want: 4},
			{op: "event", t: 7, want: 4}, // out of order: max unchanged
			{op: "event", t: 20, want: 14},
		}},
		{"an event at max - bound is not late", bounded, []step{
			{op: "event", t: 100, want: 94},
			{op: "event", t: 95, want: 94},
		}},
		{"task watermark is the minimum over inputs", bounded, []step{
			{op: "event", stream: 0, t: 100, want: 94},
			{op: "event", stream: 1, t: 50, want: 94}, // never goes back
			{op: "event", stream: 1, t: 120, want: 94},
			{op: "event", stream: 0, t: 200, want: 114},
		}},
		{"partitions of one stream are separate inputs", bounded, []step{
			{op: "event", partition: 0, t: 100, want: 94},
			{op: "event", partition: 1, t: 300, want: 94},
			{op: "event", partition: 0, t: 400, want: 294},
		}},
		{"explicit watermark raises, never lowers", bounded, []step{
			{op: "event", t: 100, want: 94},
			{op: "raise", t: 50, want: 94},
			{op: "raise", t: 150, want: 150},
			{op: "event", t: 160, want: 154},
		}},
		{"raise-all applies to inputs that appear later", bounded, []step{
			{op: "raise-all", t: 6, want: 6}, // holds for inputs not seen yet too
			{op: "event", stream: 1, t: 2, want: 6},
		}},
		{"raise-stream applies to every partition of the stream", bounded, []step{
			{op: "event", partition: 0, t: 10, want: 4},
			{op: "event", partition: 1, t: 10, want: 4},
			{op: "event", stream: 1, t: 100, want: 4},
			{op: "raise-stream", stream: 0, t: 50, want: 50},
		}},
		{"an idle input stops holding the minimum", idle, []step{
			{op: "event", stream: 0, t: 1000, want: 999},
			{op: "event", stream: 1, t: 10, want: 999},
			{op: "event", stream: 0, t: 2000, want: 999}, // stream 1 still active, holds 9
			{op: "tick", t: 99, want: 999},
			{op: "event", stream: 0, t: 2001, want: 999},
			{op: "tick", t: 1, want: 2000}, // stream 1 silent for exactly 100: idle now
			{op: "event", stream: 0, t: 2002, want: 2001},
			{op: "event", stream: 1, t: 3000, want: 2001}, // back, behind: cannot pull the task back
			{op: "event", stream: 0, t: 5000, want: 2999},
		}},
		{"every input idle: the watermark stays", idle, []step{
			{op: "event", t: 1000, want: 999},
			{op: "tick", t: 500, want: 999},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &manualClock{}
			w := NewWatermarks(clock)
			for i, s := range tt.steps {
				id := InputID{Stream: s.stream, Partition: s.partition}
				switch s.op {
				case "event":
					w.Observe(w.Input(id, tt.cfg), s.t)
				case "raise":
					w.Raise(w.Input(id, tt.cfg), s.t)
				case "raise-stream":
					w.RaiseStream(s.stream, s.t)
				case "raise-all":
					w.RaiseAll(s.t)
				case "tick":
					clock.now += s.t
				}
				if got := w.Current(); got != s.want {
					t.Fatalf("step %d (%s t=%d): watermark %d, want %d", i, s.op, s.t, got, s.want)
				}
			}
		})
	}
}

// TestClockStart: inputs registered while the clock reads MinTime (replay
// before its first record timestamp) hold the watermark back from the clock's
// first reading until they have been silent for IdleAfter after it; while the
// clock has not started, none goes idle.
func TestClockStart(t *testing.T) {
	clock := &manualClock{now: MinTime}
	w := NewWatermarks(clock)
	cfg := WatermarkConfig{IdleAfter: 100}
	a, b := w.Input(InputID{Stream: 0}, cfg), w.Input(InputID{Stream: 1}, cfg)
	check := func(what string, want int64) {
		t.Helper()
		if got := w.Current(); got != want {
			t.Fatalf("%s: watermark %d, want %d", what, got, want)
		}
	}
	w.Observe(a, 50)
	check("b has sent nothing, the clock has not started", MinTime)
	clock.now = 1000
	w.Observe(a, 60)
	check("the clock starts at 1000: b is active from then", MinTime)
	if w.Idle(b) {
		t.Fatal("b idle as the clock starts")
	}
	clock.now = 1099
	w.Observe(a, 60)
	check("b silent for 99", MinTime)
	clock.now = 1100
	w.Observe(a, 60)
	check("b silent for 100: idle", 59)
	w.Observe(b, 70)
	check("b is back, ahead of a", 59)
}

func TestFinish(t *testing.T) {
	w := NewWatermarks(&manualClock{})
	w.Observe(w.Input(InputID{}, WatermarkConfig{}), 5)
	if got := w.Finish(); got != MaxTime {
		t.Fatalf("Finish = %d, want MaxTime", got)
	}
	w.Observe(w.Input(InputID{}, WatermarkConfig{}), 6)
	if got := w.Current(); got != MaxTime {
		t.Fatalf("after Finish, Current = %d, want MaxTime", got)
	}
}

func TestAddSat(t *testing.T) {
	tests := []struct{ a, b, want int64 }{
		{1, 2, 3},
		{MaxTime, 1, MaxTime},
		{MaxTime - 1, 5, MaxTime},
		{MinTime, -1, MinTime},
		{MinTime + 1, -5, MinTime},
		{-5, 3, -2},
	}
	for _, tt := range tests {
		if got := AddSat(tt.a, tt.b); got != tt.want {
			t.Errorf("AddSat(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
