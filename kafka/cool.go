package kafka

import "time"

// cooling is a task's passes over its keys: the epoch and the time the last
// one began, and whether one is going on.
type cooling struct {
	epoch  uint32
	start  time.Time
	active bool
	before uint32 // the going pass freezes keys last changed before this epoch
}

// startCool begins a pass once Config.FreezeIdle has gone by since the
// last one began. It freezes the keys no change has touched since the pass
// before began, idle at least that long and at most twice (engine.Task.Cool,
// docs/design.md "Idle keys, kept as their records"); the task's loop runs
// it a slice at a time (coolStep). The task's tick calls it.
func (t *task) startCool() {
	if t.eng.Warming() {
		t.signalStep() // frozen keys wake soon: coolStep thaws them ahead
	}
	c := &t.cool
	if c.active {
		t.signalStep() // a cut may have taken the loop's slices meanwhile
		return
	}
	if idle := t.s.cfg.FreezeIdle; idle < 0 || time.Since(c.start) < idle {
		return
	}
	c.before, c.epoch, c.start = c.epoch, t.eng.Epoch(), time.Now()
	if c.before == 0 {
		return // the first pass: no epoch a while ago yet
	}
	c.active = true
	t.signalStep()
}

// coolStep thaws the frozen keys that wake within a minute of event time
// (engine.Task.Warm), so that keys due at one time (every key's window at
// the end of an hour) do not all thaw in the one advance that reaches it;
// then it freezes keys for a slice of the going pass, if any. It reports
// whether either has more to do. A cut in progress goes first (stepCut).
func (t *task) coolStep() bool {
	if t.eng.Warming() && !t.eng.Warm(cutSlice) {
		return true
	}
	c := &t.cool
	if !c.active {
		return false
	}
	if !t.eng.Cool(cutSlice, c.before) {
		return true
	}
	c.active = false
	keys, bytes := t.eng.Cold()
	t.s.log.Debug("idle keys frozen", "task", t.part, "cold_keys", keys, "cold_bytes", bytes,
		"took", time.Since(c.start))
	return false
}

// signalStep asks the task's loop for a slice of work between batches.
func (t *task) signalStep() {
	select {
	case t.stepSig <- struct{}{}:
	default:
	}
}
