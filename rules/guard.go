package rules

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrStopped is the error of a rule evaluation that a Guard stopped: it ran
// longer than its time limit (docs/design.md, "Rule safety").
var ErrStopped = errors.New("stopped: the evaluation ran longer than the rule time limit")

// Guard lets a watchdog see which rule a task is evaluating and stop that
// evaluation. The static cost bound makes every accepted expression finish;
// the guard covers what the bound assumes and a run-time input breaks (a field
// longer than max_field_bytes, an enrichment's large value), and shutdown.
//
// The task goroutine marks each rule evaluation (Evaluator.When) and the end of
// a decision (Evaluator.Idle); any goroutine reads the mark (Running) and stops
// it (Stop). expr's VM cannot be preempted, so a stopped evaluation fails at its
// next call of one of Vigil's functions (a field read of an untyped value,
// history(), its features, match) and at the latest when it returns: its result
// is then ErrStopped, whatever the VM computed. Safe for concurrent use.
type Guard struct {
	running atomic.Uint64 // the mark of the rule evaluation under way, 0 when none
	stop    atomic.Uint64 // the mark to stop, or stopAll
	watched bool          // evaluations are marked (Watch)
}

// Watch makes the evaluators using g mark each rule evaluation, for a
// watchdog (Running). Without it g only serves StopAll, and an evaluation
// costs no atomic store. Call it before g is used.
func (g *Guard) Watch() { g.watched = true }

// stopAll stops every evaluation (shutdown).
const stopAll = ^uint64(0)

// Evaluation identifies one rule evaluation: a sequence number and the rule.
type Evaluation uint64

// Rule is the index of the rule evaluation m runs.
func (m Evaluation) Rule() int { return int(m&0xfffff) - 1 }

// Running returns the mark of the rule evaluation under way, or 0 (always
// 0 unless g is watched).
func (g *Guard) Running() Evaluation { return Evaluation(g.running.Load()) }

// Stop stops evaluation m if it is still running (or fails it when it
// returns): its rule's result is ErrStopped.
func (g *Guard) Stop(m Evaluation) { g.stop.Store(uint64(m)) }

// StopAll stops every evaluation from now on: for a shutdown that must not
// wait for a slow rule.
func (g *Guard) StopAll() { g.stop.Store(stopAll) }

// stopped reports whether the evaluation marked m is to stop.
func (g *Guard) stopped(m uint64) bool {
	s := g.stop.Load()
	return s != 0 && (s == m || s == stopAll)
}

// SetGuard makes the evaluator mark its rule evaluations on g and honour its
// stops. Call it before the evaluator is used.
func (e *Evaluator) SetGuard(g *Guard) { e.ctx.guard = g }

// Idle marks the end of a decision's rule evaluations.
func (e *Evaluator) Idle() {
	if g := e.ctx.guard; g != nil && g.watched {
		g.running.Store(0)
	}
}

// begin marks the evaluation of rule r on the (watched) guard.
func (e *Evaluator) begin(r int) {
	e.seq++
	e.ctx.mark = e.seq<<20 | uint64(r+1)
	e.ctx.guard.running.Store(e.ctx.mark)
}

// check returns ErrStopped when the current evaluation is to stop.
func (ctx *Context) check() error {
	if ctx.guard != nil && ctx.guard.stopped(ctx.mark) {
		return ErrStopped
	}
	return nil
}

// stoppedRule wraps ErrStopped with the rule's name.
func (e *Evaluator) stoppedRule(r int) error {
	return fmt.Errorf("rule %s: %w", e.rs.Rules[r].Name, ErrStopped)
}
