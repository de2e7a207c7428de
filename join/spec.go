package join

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Spec is a join's bounds: a pair (l, r) joins when r.Time - l.Time is in
// [Lower, Upper] (milliseconds), each bound inclusive unless its Exclusive
// flag is set. Lower <= Upper; either may be negative. A Spec is a plain
// value, safe to copy and share.
type Spec struct {
	Lower, Upper                   int64
	LowerExclusive, UpperExclusive bool
}

// Validate reports why s cannot be used: a lower bound above the upper one,
// or a range that exclusivity leaves empty (times are whole milliseconds, so
// (0, 0], [0, 0) and (5, 6) match nothing). It returns nil for a usable
// Spec.
func (s Spec) Validate() error {
	if s.Lower > s.Upper {
		return fmt.Errorf("join bounds: lower %s is above upper %s", fmtMillis(s.Lower), fmtMillis(s.Upper))
	}
	if _, _, ok := s.effective(); !ok {
		open, closing := "[", "]"
		if s.LowerExclusive {
			open = "("
		}
		if s.UpperExclusive {
			closing = ")"
		}
		return fmt.Errorf("join bounds: %s%s, %s%s is empty (times are whole milliseconds)",
			open, fmtMillis(s.Lower), fmtMillis(s.Upper), closing)
	}
	return nil
}

// effective returns the inclusive bounds [lo, hi] that s stands for (Flink
// shifts an exclusive bound by one millisecond), and false when that range
// is empty. Lower <= Upper is assumed.
func (s Spec) effective() (lo, hi int64, ok bool) {
	lo, hi = s.Lower, s.Upper
	if s.LowerExclusive {
		if lo == math.MaxInt64 {
			return 0, 0, false
		}
		lo++
	}
	if s.UpperExclusive {
		if hi == math.MinInt64 {
			return 0, 0, false
		}
		hi--
	}
	return lo, hi, lo <= hi
}

// fmtMillis formats ms as a Go duration ("5ms", "1m0s"), falling back to
// plain milliseconds where nanoseconds would not fit in an int64.
func fmtMillis(ms int64) string {
	const perMs = int64(time.Millisecond)
	if ms > math.MaxInt64/perMs || ms < math.MinInt64/perMs {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return time.Duration(ms * perMs).String()
}

// addSat returns a+b saturated to the int64 range, and the direction of the
// overflow: -1 below math.MinInt64, +1 above math.MaxInt64, 0 if exact.
func addSat(a, b int64) (int64, int) {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64, 1
	case b < 0 && s > a:
		return math.MinInt64, -1
	}
	return s, 0
}

// subSat returns a-b saturated to the int64 range, with the direction of
// the overflow as addSat does.
func subSat(a, b int64) (int64, int) {
	s := a - b
	switch {
	case b < 0 && s < a:
		return math.MaxInt64, 1
	case b > 0 && s > a:
		return math.MinInt64, -1
	}
	return s, 0
}
