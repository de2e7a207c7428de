package stream

import "math"

// MinTime is the watermark before any input has been seen.
const MinTime int64 = math.MinInt64

// MaxTime is the watermark at the end of a bounded input: every window fires and
// every timer runs.
const MaxTime int64 = math.MaxInt64

// Event is one decoded input record. Value is the decoded JSON object; Raw is the
// same object's text as received, kept so that outputs which echo the event (late
// side output, DLQ, matches) are byte-identical to the input.
//
// An Event is immutable once decoded: operators may share it (history, windows,
// pattern buffers) without copying.
type Event struct {
	Stream    int   // index of the stream in the ruleset
	Partition int32 // input partition (Kafka partition, or "partition" of a replay line)
	Offset    int64 // position in the input: Kafka offset, or replay line number
	Key       string
	Time      int64 // event time, ms
	ID        string
	Value     map[string]any
	Raw       string
}

// AddSat returns a+b, saturated at MinTime and MaxTime instead of wrapping.
// Time arithmetic near the ends of the range (MaxTime watermarks, huge
// lateness) must not overflow into the past.
func AddSat(a, b int64) int64 {
	s := a + b
	if b > 0 && s < a {
		return MaxTime
	}
	if b < 0 && s > a {
		return MinTime
	}
	return s
}
