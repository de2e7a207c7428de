package workload

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Report settings of Produce.
const (
	// behindReported is how far behind its schedule sending may run before
	// the progress and the summary say it fell behind.
	behindReported = 500 * time.Millisecond
	// terminalEvery is how often the progress line of a terminal is
	// redrawn.
	terminalEvery = 250 * time.Millisecond
)

// schedule describes the send rate.
func (p *producer) schedule() string {
	if p.rate <= 0 {
		return "as fast as the brokers take them"
	}
	return fmt.Sprintf("%s records/s: the workload's clock at %s times real time", fmtRate(p.rate), fmtSpeed(p.rate/p.eventRate))
}

// noteErr keeps the first few distinct produce errors for the summary.
func (p *producer) noteErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.seen == nil {
		p.mu.seen = make(map[string]bool)
	}
	if msg := err.Error(); !p.mu.seen[msg] && len(p.mu.errs) < 5 {
		p.mu.seen[msg] = true
		p.mu.errs = append(p.mu.errs, msg)
	}
}

// sum adds up the per-stream counters a.
func sum(a *[len(streamNames)]atomic.Int64) int64 {
	var n int64
	for i := range a {
		n += a[i].Load()
	}
	return n
}

// startProgress writes progress to the report until the function it returns
// is called: a line redrawn in place on a terminal, else a line every
// p.every (none when 0). The goroutine it starts is gone when stop returns.
func (p *producer) startProgress() (stop func()) {
	every := p.every
	if p.terminal {
		every = terminalEvery
	}
	if every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				if p.terminal {
					fmt.Fprint(p.report, "\r\033[K")
				}
				return
			case <-t.C:
			}
			line := p.progressLine(time.Since(p.start))
			if p.terminal {
				fmt.Fprintf(p.report, "\r%s\033[K", line)
			} else {
				fmt.Fprintln(p.report, line)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// progressLine describes the sending elapsed after its start.
func (p *producer) progressLine(elapsed time.Duration) string {
	sent, acked := sum(&p.sent), sum(&p.acked)
	line := fmt.Sprintf("%.1fs: sent %d of %d (%.0f%%), acknowledged %d, %s records/s, event time +%s", elapsed.Seconds(), sent, p.total,
		100*float64(sent)/float64(max(p.total, 1)), acked, fmtRate(float64(sent)/elapsed.Seconds()),
		(time.Duration(p.clock.Load()) * time.Millisecond).Round(time.Second))
	if f := sum(&p.failed); f > 0 {
		line += fmt.Sprintf(", %d failed", f)
	}
	if b := time.Duration(p.behind.Load()); b >= behindReported {
		line += fmt.Sprintf(", %s behind the schedule", b.Round(time.Millisecond))
	}
	return line
}

// summary writes what was produced to the report, and returns an error when
// a record was not acknowledged (refused, timed out, or left by an
// interruption) or not sent. sendEnd is when sending ended, end when the
// last acknowledgement came; flushErr is the wait's error.
func (p *producer) summary(sendEnd, end time.Time, flushErr error) error {
	took := end.Sub(p.start)
	sent, acked, failed, canceled := sum(&p.sent), sum(&p.acked), sum(&p.failed), p.canceled.Load()
	var per []string
	for k, s := range streamNames {
		per = append(per, fmt.Sprintf("%s %d", s, p.acked[k].Load()))
	}
	fmt.Fprintf(p.report, "vigil gen: %d records acknowledged in %s (%s records/s): %s\n",
		acked, took.Round(time.Millisecond), fmtRate(float64(acked)/took.Seconds()), strings.Join(per, ", "))
	if p.rate > 0 && sent > 0 {
		sending := sendEnd.Sub(p.start)
		behind := time.Duration(p.behind.Load())
		if behind >= behindReported {
			fmt.Fprintf(p.report, "vigil gen: sending fell behind the schedule (the workload's clock at %s times real time, %s records/s) by up to %s, "+
				"sending for %s: the brokers, or this machine, could not take the records that fast\n",
				fmtSpeed(p.rate/p.eventRate), fmtRate(p.rate), behind.Round(time.Millisecond), sending.Round(time.Millisecond))
		} else {
			fmt.Fprintf(p.report, "vigil gen: sent on schedule (the workload's clock at %s times real time, %s records/s), "+
				"at most %s behind it, for %s\n", fmtSpeed(p.rate/p.eventRate), fmtRate(p.rate), behind.Round(time.Millisecond), sending.Round(time.Millisecond))
		}
	}
	if failed > 0 {
		var by []string
		for k, s := range streamNames {
			if f := p.failed[k].Load(); f > 0 {
				by = append(by, fmt.Sprintf("%s %d", s, f))
			}
		}
		fmt.Fprintf(p.report, "vigil gen: %d produce errors (%s):\n", failed, strings.Join(by, ", "))
		p.mu.Lock()
		for _, e := range p.mu.errs {
			fmt.Fprintf(p.report, "  %s\n", e)
		}
		p.mu.Unlock()
	} else {
		fmt.Fprintln(p.report, "vigil gen: 0 produce errors")
	}
	var errs []error
	if sent < p.total {
		errs = append(errs, fmt.Errorf("interrupted after %d of %d records", sent, p.total))
	}
	if missing := sent - acked; missing > 0 {
		why := []string{}
		if failed > 0 {
			why = append(why, fmt.Sprintf("%d refused or timed out", failed))
		}
		if canceled > 0 {
			why = append(why, fmt.Sprintf("%d canceled by the interruption", canceled))
		}
		if rest := missing - failed - canceled; rest > 0 {
			why = append(why, fmt.Sprintf("%d unanswered (%v)", rest, flushErr))
		}
		errs = append(errs, fmt.Errorf("%d of %d records sent were not acknowledged: %s", missing, sent, strings.Join(why, ", ")))
	}
	return errors.Join(errs...)
}

// fmtRate formats a rate without decimals.
func fmtRate(r float64) string { return fmt.Sprintf("%.0f", r) }

// fmtSpeed formats a speed-up factor.
func fmtSpeed(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }
