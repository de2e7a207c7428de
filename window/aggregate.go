package window

import (
	"math"
	"strconv"
	"strings"
)

// AggKind is the kind of an aggregate function. The zero AggKind is not a
// valid kind.
type AggKind uint8

const (
	// Count counts the elements of the window; it ignores its argument.
	Count AggKind = iota + 1
	// Sum adds the numeric arguments; float64, 0 when there are none.
	Sum
	// Min is the smallest numeric argument; float64, nil when there are none.
	Min
	// Max is the largest numeric argument; float64, nil when there are none.
	Max
	// Avg is the mean of the numeric arguments; float64, nil when there are none.
	Avg
	// CountDistinct counts the distinct non-nil arguments; int64.
	CountDistinct
)

var aggNames = [...]string{
	Count:         "count",
	Sum:           "sum",
	Min:           "min",
	Max:           "max",
	Avg:           "avg",
	CountDistinct: "count_distinct",
}

// ParseAggKind returns the AggKind named name ("count", "sum", "min", "max",
// "avg", "count_distinct") and whether there is one.
func ParseAggKind(name string) (AggKind, bool) {
	for k, n := range aggNames {
		if n != "" && n == name {
			return AggKind(k), true
		}
	}
	return 0, false
}

// String returns the name ParseAggKind accepts for k.
func (k AggKind) String() string {
	if k.valid() {
		return aggNames[k]
	}
	return "AggKind(" + strconv.Itoa(int(k)) + ")"
}

func (k AggKind) valid() bool { return k >= Count && k <= CountDistinct }

// Aggregate is one named aggregate of a window definition. Name is the
// caller's label for the value (it must be non-empty and unique within a
// definition); the operator only reports values in the order of the
// aggregates.
type Aggregate struct {
	Name string
	Kind AggKind
}

// acc is the accumulator of one aggregate in one window. The element count
// that Count reports is kept once per window, not per aggregate.
type acc struct {
	n   int64   // numeric arguments seen (Sum, Min, Max, Avg)
	f   float64 // sum (Sum, Avg) or extreme (Min, Max)
	set map[any]struct{}
}

// add folds the argument v into a for an aggregate of kind k.
func (a *acc) add(k AggKind, v any) {
	switch k {
	case Sum, Avg:
		if f, ok := number(v); ok {
			a.n++
			a.f += f
		}
	case Min, Max:
		if f, ok := number(v); ok {
			a.fold(k, 1, f)
		}
	case CountDistinct:
		if d, ok := distinctKey(v); ok {
			if a.set == nil {
				a.set = make(map[any]struct{})
			}
			if _, seen := a.set[d]; !seen {
				if s, isString := d.(string); isString {
					// The window may outlive the record the string points into.
					d = strings.Clone(s)
				}
				a.set[d] = struct{}{}
			}
		}
	}
}

// fold merges n numeric values whose extreme is f into a Min or Max
// accumulator. math.Min and math.Max make the result independent of the
// order of the values, NaN and signed zeros included.
func (a *acc) fold(k AggKind, n int64, f float64) {
	switch {
	case a.n == 0:
		a.f = f
	case k == Min:
		a.f = math.Min(a.f, f)
	default:
		a.f = math.Max(a.f, f)
	}
	a.n += n
}

// merge folds b into a; both belong to an aggregate of kind k. b must not be
// used afterwards (its distinct set may now be a's).
func (a *acc) merge(k AggKind, b *acc) {
	switch k {
	case Sum, Avg:
		a.n += b.n
		a.f += b.f
	case Min, Max:
		if b.n > 0 {
			a.fold(k, b.n, b.f)
		}
	case CountDistinct:
		if len(a.set) < len(b.set) {
			a.set, b.set = b.set, a.set
		}
		for d := range b.set {
			a.set[d] = struct{}{}
		}
	}
}

// value is the result of an aggregate of kind k other than Count (which
// reports the window's element count).
func (a *acc) value(k AggKind) any {
	switch k {
	case Sum:
		return a.f
	case CountDistinct:
		return int64(len(a.set))
	}
	if a.n == 0 {
		return nil
	}
	if k == Avg {
		return a.f / float64(a.n)
	}
	return a.f
}

// number converts a Go numeric value to float64. Anything else (nil,
// strings, bools, json.Number, …) is not numeric.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float32:
		return float64(x), true
	case int32:
		return float64(x), true
	case int16:
		return float64(x), true
	case int8:
		return float64(x), true
	case uint64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint8:
		return float64(x), true
	}
	return 0, false
}

// nanKey stands for every NaN in a distinct set (NaN != NaN, so NaN itself
// would be counted once per occurrence).
type nanKey struct{}

// distinctKey normalises v for CountDistinct so that equal numbers of
// different Go types count once: integral numbers become int64 (uint64
// above math.MaxInt64), other floats stay float64. Strings and bools are
// kept; nil and other types are not counted.
func distinctKey(v any) (any, bool) {
	switch x := v.(type) {
	case string, bool, int64:
		return x, true
	case float64:
		return floatKey(x), true
	case int:
		return int64(x), true
	case float32:
		return floatKey(float64(x)), true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint64:
		return uintKey(x), true
	case uint:
		return uintKey(uint64(x)), true
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return nil, false
}

func uintKey(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
}

func floatKey(f float64) any {
	switch {
	case f != f:
		return nanKey{}
	case f != math.Trunc(f):
		return f
	case f >= -(1<<63) && f < 1<<63:
		return int64(f)
	case f >= 1<<63 && f < 1<<64:
		return uint64(f)
	}
	return f // ±Inf and integral values beyond 64 bits
}
