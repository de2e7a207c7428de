package window

import (
	"fmt"
	"math"
	"testing"
)

var benchSpecs = []struct {
	name string
	spec Spec
}{
	{"tumbling", Spec{Kind: Tumbling, Size: 60_000}},
	{"sliding", Spec{Kind: Sliding, Size: 600_000, Slide: 60_000}}, // 10 windows per element
	{"session", Spec{Kind: Session, Gap: 60_000}},
}

var benchKeyCounts = []int{1_000, 100_000}

var benchAggs = []Aggregate{{"count", Count}, {"total", Sum}}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
	}
	return keys
}

// BenchmarkAdd measures Add on keys that already have their windows (count
// and sum): element i goes to key i mod keys at a time that stays inside
// the first minute, so no window fires and only sessions move their timers.
func BenchmarkAdd(b *testing.B) {
	for _, bs := range benchSpecs {
		for _, n := range benchKeyCounts {
			b.Run(fmt.Sprintf("%s/keys=%d", bs.name, n), func(b *testing.B) {
				op, err := New(bs.spec, benchAggs)
				if err != nil {
					b.Fatal(err)
				}
				keys := benchKeys(n)
				fired := 0
				emit := func(Result) { fired++ }
				args := []any{nil, 12.5}
				for _, k := range keys {
					op.Add(k, 0, args, math.MinInt64, emit)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					t := int64(i/n) % 60_000
					op.Add(keys[i%n], t, args, math.MinInt64, emit)
					i++
				}
				if fired != 0 {
					b.Fatalf("%d windows fired", fired)
				}
			})
		}
	}
}

// BenchmarkAdvance measures firing and dropping windows: each iteration
// gives every key one element in the next minute (not timed) and advances
// the watermark past it, so that every key's window fires and is dropped.
// ns/window is the cost per fired window.
func BenchmarkAdvance(b *testing.B) {
	for _, bs := range benchSpecs {
		for _, n := range benchKeyCounts {
			b.Run(fmt.Sprintf("%s/keys=%d", bs.name, n), func(b *testing.B) {
				op, err := New(bs.spec, benchAggs)
				if err != nil {
					b.Fatal(err)
				}
				keys := benchKeys(n)
				fired := 0
				emit := func(Result) { fired++ }
				args := []any{nil, 12.5}
				span := max(bs.spec.Size, bs.spec.Gap)
				round := int64(0)
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					t := round * 2 * span // every element opens new windows
					for _, k := range keys {
						op.Add(k, t, args, math.MinInt64, emit)
					}
					round++
					b.StartTimer()
					op.Advance(t+span, emit)
				}
				if op.Len() != 0 {
					b.Fatalf("%d windows live after Advance", op.Len())
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/window")
			})
		}
	}
}

// BenchmarkStream measures the steady state per element, firing, cleanup
// and window creation included: every key gets one element every 6s (10 per
// tumbling minute), and the watermark follows one minute behind. The
// operator is warmed up until windows close as fast as they open.
func BenchmarkStream(b *testing.B) {
	for _, bs := range benchSpecs {
		for _, n := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", bs.name, n), func(b *testing.B) {
				op, err := New(bs.spec, benchAggs)
				if err != nil {
					b.Fatal(err)
				}
				keys := benchKeys(n)
				emit := func(Result) {}
				args := []any{nil, 12.5}
				const step, delay = 6_000, 60_000
				wm := int64(math.MinInt64)
				add := func(i int) {
					t := int64(i/n) * step
					if i%n == 0 && t >= delay {
						wm = t - delay
						op.Advance(wm, emit)
					}
					op.Add(keys[i%n], t, args, wm, emit)
				}
				lifetime := max(bs.spec.Size, bs.spec.Gap) + delay
				i := 0
				for ; int64(i/n)*step < 2*lifetime; i++ {
					add(i)
				}
				b.ReportAllocs()
				for b.Loop() {
					add(i)
					i++
				}
			})
		}
	}
}
