package engine

import (
	"errors"

	"github.com/vigil-cep/vigil/rules"
)

// Guarded makes the task mark its rule evaluations on g, so that a watchdog
// can see which rule runs and stop it (rules.Guard; docs/design.md, "Rule
// safety"). A stopped evaluation fails with rules.ErrStopped, recorded in the
// decision's errors; stopped is then called with the rule's name (on the
// task's goroutine: it must not block), and the task skips the rule, with
// the same error, until it runs another ruleset.
func Guarded(g *rules.Guard, stopped func(rule string)) Option {
	return optionFunc(func(t *Task) { t.guard, t.onStopped = g, stopped })
}

// errQuarantined is the error of a rule the task skips after it was stopped.
var errQuarantined = errors.New("quarantined: an earlier evaluation ran longer than the rule time limit")

// stopped quarantines rule ri in this task when err says a guard stopped it.
func (t *Task) stopped(ri int, err error) {
	if !errors.Is(err, rules.ErrStopped) {
		return
	}
	if t.quarantined == nil {
		t.quarantined = make(map[int]bool)
	}
	t.quarantined[ri] = true
	if t.onStopped != nil {
		t.onStopped(t.rs.Rules[ri].Name)
	}
}
