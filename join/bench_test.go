package join

import (
	"fmt"
	"math"
	"testing"
)

var benchKeyCounts = []int{1_000, 100_000}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
	}
	return keys
}

// BenchmarkAdd measures join probes in the steady state: element i goes to
// key i mod keys at time round = i / keys, on the left in even rounds and
// the right in odd ones, with bounds [-2*inrange, 2*inrange] so that each
// probe finds inrange elements of the other side in range (pairs/op). The
// watermark follows 2*inrange behind and Advance runs once per round, so
// ns/op includes cleanup and 1e9/(ns/op) is probes per second. Elements
// come from a ring that is larger than what the operator holds, so the
// operator's own allocations show.
func BenchmarkAdd(b *testing.B) {
	for _, n := range benchKeyCounts {
		for _, inRange := range []int64{1, 16} {
			b.Run(fmt.Sprintf("keys=%d/inrange=%d", n, inRange), func(b *testing.B) {
				reach := 2 * inRange
				op, err := New(Spec{Lower: -reach, Upper: reach}, nil)
				if err != nil {
					b.Fatal(err)
				}
				keys := benchKeys(n)
				ring := int(2*reach + 3) // alive per key: times in [round-2*reach, round]
				elems := make([]Element, n*ring)
				pairs := 0
				emit := func(Pair) { pairs++ }
				wm := int64(math.MinInt64)
				i := 0
				add := func() {
					k, round := i%n, int64(i/n)
					if k == 0 && round > reach {
						wm = round - reach
						op.Advance(wm)
					}
					el := &elems[k*ring+int(round)%ring]
					*el = Element{Time: round, Seq: uint64(i)}
					op.Add(keys[k], Side(round%2), el, wm, emit)
					i++
				}
				for i < n*ring*2 { // warm up until cleanup keeps pace
					add()
				}
				pairs = 0
				b.ReportAllocs()
				for b.Loop() {
					add()
				}
				b.ReportMetric(float64(pairs)/float64(b.N), "pairs/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
			})
		}
	}
}

// BenchmarkAdvance measures dropping: each iteration gives every key one
// left and one right element (not timed) and advances the watermark past
// both, so that every key is dropped and forgotten. ns/elem is the cost
// per dropped element.
func BenchmarkAdvance(b *testing.B) {
	for _, n := range benchKeyCounts {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			op, err := New(Spec{Lower: -1000, Upper: 1000}, nil)
			if err != nil {
				b.Fatal(err)
			}
			keys := benchKeys(n)
			elems := make([]Element, 2*n)
			emit := func(Pair) {}
			round := int64(0)
			dropped := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				t := round * 10_000
				for k, key := range keys {
					elems[2*k] = Element{Time: t, Seq: uint64(2 * k)}
					elems[2*k+1] = Element{Time: t + 1, Seq: uint64(2*k + 1)}
					op.Add(key, Left, &elems[2*k], t, emit)
					op.Add(key, Right, &elems[2*k+1], t, emit)
				}
				dropped += op.Len()
				round++
				b.StartTimer()
				op.Advance(t + 5_000)
			}
			if op.Len() != 0 {
				b.Fatalf("%d elements buffered after Advance", op.Len())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(dropped), "ns/elem")
		})
	}
}
