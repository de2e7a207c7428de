package window

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Kind is the kind of a window assigner. The zero Kind is not a valid kind.
type Kind uint8

const (
	// Tumbling windows have a fixed size and do not overlap: [start, start+Size).
	Tumbling Kind = iota + 1
	// Sliding windows have a fixed size and start every Slide; an element
	// belongs to every window that contains it.
	Sliding
	// Session windows start at an element, last Gap, and merge with every
	// session of the same key that they overlap or touch.
	Session
)

// String returns the lower-case name of k ("tumbling", "sliding", "session").
func (k Kind) String() string {
	switch k {
	case Tumbling:
		return "tumbling"
	case Sliding:
		return "sliding"
	case Session:
		return "session"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// maxWindowsPerElement bounds Size/Slide of a sliding window: every element
// updates that many windows per key, so a fat-fingered slide ("1ms" for a
// day) would otherwise stall the task and multiply the state of every key.
const maxWindowsPerElement = 10000

// Spec describes one event-time window definition. All times are int64
// milliseconds. Only the fields of its Kind may be set: Size and Offset for
// Tumbling; Size, Slide and Offset for Sliding; Gap for Session.
// AllowedLateness applies to every kind.
type Spec struct {
	Kind Kind
	// Size is the length of a tumbling or sliding window.
	Size int64
	// Slide is the distance between the starts of two sliding windows; it
	// must not exceed Size (an element between two windows would belong to
	// none and could not be told apart from a late one).
	Slide int64
	// Offset shifts the grid of tumbling and sliding windows, e.g. -8h for
	// days in UTC+8. |Offset| must be smaller than Size (Slide for sliding).
	Offset int64
	// Gap is the inactivity gap that closes a session.
	Gap int64
	// AllowedLateness keeps a window's state this long after it fired, so
	// that late elements update it and fire it again.
	AllowedLateness int64
}

// Validate reports every problem of s, joined with errors.Join, or nil.
// Each message starts with the kind of window, e.g.
// "sliding window: slide 0s must be positive".
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s window: "+format, append([]any{s.Kind}, args...)...))
	}
	unused := func(name string, v int64, applies string) {
		if v != 0 {
			bad("%s %s does not apply (only %s)", name, fmtMillis(v), applies)
		}
	}
	switch s.Kind {
	case Tumbling:
		if s.Size <= 0 {
			bad("size %s must be positive", fmtMillis(s.Size))
		} else if s.Offset >= s.Size || s.Offset <= -s.Size {
			bad("offset %s must be smaller than size %s in absolute value", fmtMillis(s.Offset), fmtMillis(s.Size))
		}
		unused("slide", s.Slide, "size and offset")
		unused("gap", s.Gap, "size and offset")
	case Sliding:
		if s.Size <= 0 {
			bad("size %s must be positive", fmtMillis(s.Size))
		}
		if s.Slide <= 0 {
			bad("slide %s must be positive", fmtMillis(s.Slide))
		}
		if s.Size > 0 && s.Slide > 0 {
			if s.Slide > s.Size {
				bad("slide %s must not exceed size %s", fmtMillis(s.Slide), fmtMillis(s.Size))
			} else if n := windowsPerElement(s.Size, s.Slide); n > maxWindowsPerElement {
				bad("size %s and slide %s put each element in up to %d windows, more than %d",
					fmtMillis(s.Size), fmtMillis(s.Slide), n, maxWindowsPerElement)
			}
			if s.Offset >= s.Slide || s.Offset <= -s.Slide {
				bad("offset %s must be smaller than slide %s in absolute value", fmtMillis(s.Offset), fmtMillis(s.Slide))
			}
		}
		unused("gap", s.Gap, "size, slide and offset")
	case Session:
		if s.Gap <= 0 {
			bad("gap %s must be positive", fmtMillis(s.Gap))
		}
		unused("size", s.Size, "gap")
		unused("slide", s.Slide, "gap")
		unused("offset", s.Offset, "gap")
	default:
		if s.Kind == 0 {
			return errors.New("window: kind is not set")
		}
		return fmt.Errorf("window: unknown kind %d", s.Kind)
	}
	if s.AllowedLateness < 0 {
		bad("allowed lateness %s must not be negative", fmtMillis(s.AllowedLateness))
	}
	return errors.Join(errs...)
}

// windowsPerElement is ceil(size/slide) for positive size and slide.
func windowsPerElement(size, slide int64) int64 {
	n := size / slide
	if size%slide != 0 {
		n++
	}
	return n
}

// fmtMillis formats ms as a Go duration ("5ms", "24h0m0s"), falling back to
// plain milliseconds where nanoseconds would not fit in an int64.
func fmtMillis(ms int64) string {
	const perMs = int64(time.Millisecond)
	if ms > math.MaxInt64/perMs || ms < math.MinInt64/perMs {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return time.Duration(ms * perMs).String()
}

// alignRem returns (t - offset) mod size in [0, size) without overflow, for
// size > 0 and |offset| < size. The window grid start at or before t is then
// t - alignRem (Flink's TimeWindow.getWindowStartWithOffset).
func alignRem(t, offset, size int64) int64 {
	a := t % size
	if a < 0 {
		a += size
	}
	b := offset % size
	if b < 0 {
		b += size
	}
	r := a - b
	if r < 0 {
		r += size
	}
	return r
}

// satAdd returns a+b for b >= 0, saturated at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satSub returns a-b for b >= 0, saturated at math.MinInt64.
func satSub(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
