package stream

// Clock reads processing time in milliseconds. Idleness is measured on it, so
// tests inject a manual clock and replay a deterministic one.
type Clock interface {
	Now() int64
}

// InputID names one input of a task: a stream and one of its partitions.
type InputID struct {
	Stream    int
	Partition int32
}

// WatermarkConfig is how one stream's inputs generate watermarks.
type WatermarkConfig struct {
	// MaxOutOfOrder is the bounded out-of-orderness: the watermark trails the
	// largest event time seen by this much, plus one millisecond.
	MaxOutOfOrder int64
	// IdleAfter is how long (processing time) an input may stay silent before it
	// stops holding back the task watermark. Zero means never idle.
	IdleAfter int64
}

// Input is the watermark state of one input. Callers keep the pointer that
// Watermarks.Input returns to avoid a map lookup per event.
type Input struct {
	ID         InputID
	cfg        WatermarkConfig
	maxSeen    int64
	explicit   int64
	lastActive int64
}

// Watermark returns the input's own watermark: the bounded out-of-orderness
// watermark of the events seen, or an explicit watermark if that is higher.
func (in *Input) Watermark() int64 {
	gen := MinTime
	if in.maxSeen != MinTime {
		gen = AddSat(in.maxSeen, -AddSat(in.cfg.MaxOutOfOrder, 1))
	}
	return max(gen, in.explicit)
}

// MaxSeen returns the largest event time observed on the input (MinTime if none).
func (in *Input) MaxSeen() int64 { return in.maxSeen }

// Watermarks tracks every input of a task and derives the task watermark. It is
// not safe for concurrent use: the task goroutine owns it.
type Watermarks struct {
	clock   Clock
	inputs  []*Input
	index   map[InputID]*Input
	floor   int64 // raised by RaiseAll: every input, including future ones, starts here
	current int64
	started bool // the clock has read something other than MinTime (see Input)
}

// NewWatermarks returns a tracker with no inputs, measuring idleness on clock.
func NewWatermarks(clock Clock) *Watermarks {
	return &Watermarks{clock: clock, index: make(map[InputID]*Input), floor: MinTime, current: MinTime}
}

// Input returns the input id, creating it with cfg on first use. A new input
// counts as active from now, so it holds the task watermark back until it has
// been silent for its IdleAfter. A clock that reads MinTime has not started
// (replay before its first record timestamp: no processing time is known
// yet); an input created then counts as active from the clock's first other
// reading, so that registering every input before the first record holds
// the watermark back for IdleAfter from there, not for no time at all.
func (w *Watermarks) Input(id InputID, cfg WatermarkConfig) *Input {
	if in, ok := w.index[id]; ok {
		return in
	}
	in := &Input{ID: id, cfg: cfg, maxSeen: MinTime, explicit: w.floor, lastActive: w.clock.Now()}
	w.index[id] = in
	w.inputs = append(w.inputs, in)
	return in
}

// Observe records an event at time t on in.
func (w *Watermarks) Observe(in *Input, t int64) {
	if t > in.maxSeen {
		in.maxSeen = t
	}
	in.lastActive = w.clock.Now()
}

// Raise lifts in's watermark to at least wm (an explicit watermark); it never
// lowers it. It counts as activity.
func (w *Watermarks) Raise(in *Input, wm int64) {
	in.explicit = max(in.explicit, wm)
	in.lastActive = w.clock.Now()
}

// RaiseStream raises every known input of stream.
func (w *Watermarks) RaiseStream(stream int, wm int64) {
	for _, in := range w.inputs {
		if in.ID.Stream == stream {
			w.Raise(in, wm)
		}
	}
}

// RaiseAll raises every input, including inputs that appear later.
func (w *Watermarks) RaiseAll(wm int64) {
	w.floor = max(w.floor, wm)
	for _, in := range w.inputs {
		w.Raise(in, wm)
	}
}

// Current recomputes and returns the task watermark: the minimum over the
// inputs that are not idle, never lower than before nor than a RaiseAll
// watermark. With every input idle (or none known) it stays where it is.
func (w *Watermarks) Current() int64 {
	now := w.clock.Now()
	if !w.started && now != MinTime {
		w.start(now) // once: no call on the path of every event
	}
	lowest, active := MaxTime, false
	for _, in := range w.inputs {
		if in.idleAt(now) {
			continue
		}
		active = true
		lowest = min(lowest, in.Watermark())
	}
	if active && lowest > w.current {
		w.current = lowest
	}
	// Every input, including those not seen yet, is at least at the floor.
	w.current = max(w.current, w.floor)
	return w.current
}

// start notes the clock's first reading other than MinTime, now: the inputs
// that have been silent since before it count as active from now. Idleness
// is judged only in Current and Idle, which call it first.
func (w *Watermarks) start(now int64) {
	w.started = true
	for _, in := range w.inputs {
		if in.lastActive == MinTime {
			in.lastActive = now
		}
	}
}

// Finish moves the task watermark to MaxTime: the end of a bounded input.
func (w *Watermarks) Finish() int64 {
	w.current = MaxTime
	return w.current
}

// Idle reports whether in is idle at the clock's current time.
func (w *Watermarks) Idle(in *Input) bool {
	now := w.clock.Now()
	if !w.started && now != MinTime {
		w.start(now)
	}
	return in.idleAt(now)
}

// idleAt reports whether the input has been silent for IdleAfter at now
// (saturating, so that a clock starting at MinTime cannot overflow).
func (in *Input) idleAt(now int64) bool {
	return in.cfg.IdleAfter > 0 && now >= AddSat(in.lastActive, in.cfg.IdleAfter)
}

// Inputs returns the known inputs in the order they appeared.
func (w *Watermarks) Inputs() []*Input { return w.inputs }
