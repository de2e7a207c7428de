package workload

import (
	"errors"
	"fmt"
	"math"
)

// Defaults for the Config fields left at zero.
const (
	// DefaultUsers is the number of distinct users (u000001, u000002, ...).
	DefaultUsers = 100_000
	// DefaultEvents is the number of records written.
	DefaultEvents = 1_000_000
	// DefaultStart is the event time of the first event: 2026-01-01T00:00:00Z in epoch ms.
	DefaultStart = 1_767_225_600_000
	// DefaultRate is the number of events per second of event time, all users together.
	DefaultRate = 2000.0
	// DefaultOutOfOrder is the fraction of events written late.
	DefaultOutOfOrder = 0.02
	// DefaultMaxDelay is the largest lateness in ms. It stays below the 5 s
	// max_out_of_order of examples/fraud.yaml so that no event is dropped as late.
	DefaultMaxDelay = 3000
	// DefaultDuplicates is the fraction of transactions sent twice.
	DefaultDuplicates = 0.005
	// DefaultFraud is the fraction of users with a planted fraud case.
	DefaultFraud = 0.01
)

// maxScenarioEvents is the most events one planted case can have (a card-testing
// burst of 15 transactions); Validate uses it to keep fraud a minority of the workload.
const maxScenarioEvents = 15

// maxScenarioSpan is the longest a planted case lasts, in ms (an account takeover).
const maxScenarioSpan = 10 * 60 * 1000

// maxTime is the largest event time Generate writes: 2^53 ms, so that decoders
// that read JSON numbers as float64 keep every time exact.
const maxTime = 1 << 53

// Config describes a workload. Every field but Seed takes its default (the
// Default* constants) when zero. For the fractions OutOfOrder, Duplicates and
// Fraud, a negative value means none. Config is a plain value, safe to copy.
type Config struct {
	// Users is the number of distinct users, named u000001 upwards (six digits at least).
	Users int
	// Events is the exact number of records written, planted fraud and duplicates included.
	Events int
	// Seed selects the workload: the same Config gives byte-identical output.
	Seed uint64
	// Start is the event time of the first event, epoch ms.
	Start int64
	// Rate is events per second of event time across all users; Events/Rate is
	// how long the workload spans in event time.
	Rate float64
	// OutOfOrder is the fraction of normal events written late, up to MaxDelay
	// ms of event time after their own time. Planted fraud events are never late.
	OutOfOrder float64
	// MaxDelay bounds lateness in ms: no event is more than MaxDelay behind the
	// largest time written before it on its stream. Keep it below the ruleset's
	// max_out_of_order (5 s in examples/fraud.yaml) or late events miss windows.
	MaxDelay int64
	// Duplicates is the fraction of normal transactions re-sent, byte-identical,
	// with the same tx_id, up to MaxDelay ms of event time later.
	Duplicates float64
	// Fraud is the fraction of users given one planted fraud case.
	Fraud float64
	// Partitions spreads users over this many input partitions (each line
	// then carries "partition"); 0 or 1 writes one partition, 0, and no field.
	Partitions int
}

// Validate reports every problem with c, joined into one error (nil if none):
// negative counts or delay, a rate or fraction that is not a finite number, a
// fraction above 1, event times beyond 2^53 ms, or more planted fraud than half
// of the events could hold.
func (c Config) Validate() error {
	var errs []error
	if c.Partitions < 0 || c.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("workload: Partitions must be between 0 and 1024, got %d", c.Partitions))
	}
	if c.Users < 0 {
		errs = append(errs, fmt.Errorf("workload: Users must not be negative, got %d", c.Users))
	}
	if c.Events < 0 {
		errs = append(errs, fmt.Errorf("workload: Events must not be negative, got %d", c.Events))
	}
	if c.Start < 0 {
		errs = append(errs, fmt.Errorf("workload: Start must not be negative, got %d", c.Start))
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		errs = append(errs, fmt.Errorf("workload: Rate must be a finite, non-negative number of events per second, got %v", c.Rate))
	}
	if c.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("workload: MaxDelay must not be negative, got %d", c.MaxDelay))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"OutOfOrder", c.OutOfOrder}, {"Duplicates", c.Duplicates}, {"Fraud", c.Fraud}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v > 1 {
			errs = append(errs, fmt.Errorf("workload: %s must be a fraction at most 1 (negative means none), got %v", f.name, f.v))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	d := c.withDefaults()
	if end := float64(d.Start) + d.spanMs() + maxScenarioSpan + float64(d.MaxDelay); end > maxTime {
		errs = append(errs, fmt.Errorf("workload: event times would reach %.0f ms, beyond 2^53: lower Start, Events or MaxDelay, or raise Rate", end))
	}
	if n := d.fraudUsers(); n*maxScenarioEvents > d.Events/2 {
		errs = append(errs, fmt.Errorf("workload: Fraud %v of %d users plants %d cases of up to %d events each, more than half of the %d events: lower Fraud or Users, or raise Events",
			d.Fraud, d.Users, n, maxScenarioEvents, d.Events))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields set to their defaults and negative
// fractions set to zero.
func (c Config) withDefaults() Config {
	if c.Users == 0 {
		c.Users = DefaultUsers
	}
	if c.Events == 0 {
		c.Events = DefaultEvents
	}
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	c.OutOfOrder = fraction(c.OutOfOrder, DefaultOutOfOrder)
	c.Duplicates = fraction(c.Duplicates, DefaultDuplicates)
	c.Fraud = fraction(c.Fraud, DefaultFraud)
	return c
}

// fraction applies the zero-means-default, negative-means-none rule.
func fraction(v, def float64) float64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// spanMs is how long the workload spans in event time, in ms.
func (c Config) spanMs() float64 { return float64(c.Events) / c.Rate * 1000 }

// fraudUsers is the number of planted fraud cases.
func (c Config) fraudUsers() int { return int(math.Round(c.Fraud * float64(c.Users))) }
