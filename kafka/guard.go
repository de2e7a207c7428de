package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/rules"
)

// The runtime guard (docs/design.md, "Rule safety"). The static cost bound
// makes every accepted rule finish; the guard is for what it assumes and an
// input breaks. A watchdog goroutine samples each task's rules.Guard: a rule
// evaluation seen running for longer than Config.RuleTimeLimit is stopped
// (it fails with rules.ErrStopped, recorded in the decision's errors), the
// task is reported stuck by Ready until it moves on, and the rule is
// quarantined: the service publishes a version of the ruleset with the rule
// disabled, authored by "vigil", so that every instance (and a restart)
// stops running it.

// quarantineAuthor is the author of the versions that quarantine a rule.
const quarantineAuthor = "vigil"

// watch runs the watchdog until ctx ends.
func (s *Service) watch(ctx context.Context) {
	tick := time.NewTicker(min(max(s.cfg.RuleTimeLimit/4, time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	seen := map[int32]sighting{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if stuck := s.inspect(now, seen); stuck == "" {
				s.stuck.Store(nil)
			} else {
				s.stuck.Store(&stuck)
			}
		}
	}
}

// sighting is the rule evaluation the watchdog last saw a task run, and
// when it first saw it.
type sighting struct {
	ev    rules.Evaluation
	since time.Time
}

// inspect is one round of the watchdog at now: it stops every evaluation
// seen running for the limit or longer, and describes the first such
// (Ready reports it), or returns "".
func (s *Service) inspect(now time.Time, seen map[int32]sighting) string {
	limit, stuck := s.cfg.RuleTimeLimit, ""
	for _, t := range s.taskList() {
		ev := t.guard.Running()
		w, ok := seen[t.part]
		if ev == 0 || !ok || w.ev != ev {
			seen[t.part] = sighting{ev, now}
			continue
		}
		ran := now.Sub(w.since)
		if ran < limit {
			continue
		}
		t.guard.Stop(ev)
		if stuck == "" {
			stuck = fmt.Sprintf("task %d is stuck in rule %s: one evaluation has run for %s (the limit is %s)",
				t.part, ruleName(t.running.Load(), ev.Rule()), ran.Round(time.Millisecond), limit)
		}
	}
	return stuck
}

func ruleName(rs *rules.Ruleset, i int) string {
	if rs == nil || i < 0 || i >= len(rs.Rules) {
		return fmt.Sprintf("#%d", i)
	}
	return rs.Rules[i].Name
}

// quarantine asks for rule to be disabled (the task goroutine calls it when
// an evaluation was stopped). It never blocks a task. The request stays
// pending until a version that disables the rule is published: a task asks
// once per rule (it skips the rule from then on), so nothing may drop it.
func (s *Service) quarantine(rule string) {
	s.quarantines.mu.Lock()
	s.quarantines.pending[rule] = true
	s.quarantines.mu.Unlock()
	select {
	case s.quarantines.signal <- struct{}{}:
	default: // a signal is pending already
	}
}

// quarantineRetry is how soon a quarantine that could not be published is tried again.
const quarantineRetry = time.Second

// quarantiner publishes the quarantines asked for until ctx ends, retrying
// those that fail.
func (s *Service) quarantiner(ctx context.Context) {
	retry := time.NewTicker(quarantineRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quarantines.signal:
		case <-retry.C:
		}
		s.quarantines.mu.Lock()
		names := slices.Sorted(maps.Keys(s.quarantines.pending))
		s.quarantines.mu.Unlock()
		for _, rule := range names {
			if err := s.disableRule(ctx, rule); err != nil {
				s.log.Error("cannot quarantine a rule that ran longer than the rule time limit; retrying", "rule", rule, "err", err)
				continue
			}
			s.quarantines.mu.Lock()
			delete(s.quarantines.pending, rule)
			s.quarantines.mu.Unlock()
		}
	}
}

// disableRule publishes the current document with rule set disabled, unless
// it is no longer active or shadow there (another instance quarantined it,
// or an analyst changed it). A race with another publisher is retried.
func (s *Service) disableRule(ctx context.Context, rule string) error {
	for range 3 {
		cur := s.Current()
		if cur == nil {
			return errors.New("no ruleset version")
		}
		doc, err := rulesdoc.Parse([]byte(cur.Document))
		if err != nil {
			return err
		}
		item, ok := doc.Item("rules", rule)
		if !ok {
			return nil
		}
		if mode, _ := item["mode"].(string); mode == "disabled" || mode == "draft" {
			return nil
		}
		item["mode"] = "disabled"
		doc.Set("rules", rule, item)
		out, err := doc.Encode()
		if err != nil {
			return err
		}
		comment := fmt.Sprintf("quarantined: an evaluation of rule %s ran longer than the rule time limit of %s", rule, s.cfg.RuleTimeLimit)
		_, err = s.Publish(ctx, out, cur.Number, quarantineAuthor, comment)
		if errors.Is(err, service.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return err
		}
		s.cfg.Metrics.RuleQuarantined(rule)
		s.log.Warn("quarantined a rule: it is disabled in a new ruleset version", "rule", rule, "version", cur.Number+1,
			"limit", s.cfg.RuleTimeLimit)
		return nil
	}
	return service.ErrVersionConflict
}
