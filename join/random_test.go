package join

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
)

var randomSeed = flag.Uint64("join.seed", 0, "seed of TestRandomStream (0: from the clock)")

// TestRandomStream feeds long random two-sided streams with a moving
// watermark to the Operator and checks, after every call, against a
// brute-force join over every non-late element seen so far:
//
//   - Add's late flag is Time < the largest watermark given so far;
//   - the pairs Add emits are exactly the in-range, condition-meeting pairs
//     of the new element with the non-late elements of the other side that
//     came before it, in the other side's (Time, Seq) order, with Time the
//     larger time; so over the whole stream every pair of the full join is
//     emitted exactly once and nothing else is;
//   - Len() equals the number of non-late elements that can still join a
//     future non-late one, and stays within the elements whose time is
//     within the bounds' reach of the watermark;
//   - the internal invariants hold (sorted buffers, heap, counts).
func TestRandomStream(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -join.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 60 {
		spec := randomSpec(rng)
		withCond := rng.IntN(2) == 0
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			t.Logf("%+v condition=%v", spec, withCond)
			runRandomStream(t, rng, spec, withCond)
		})
	}
}

func randomSpec(rng *rand.Rand) Spec {
	for {
		s := Spec{Lower: rng.Int64N(41) - 20, LowerExclusive: rng.IntN(3) == 0, UpperExclusive: rng.IntN(3) == 0}
		s.Upper = s.Lower + rng.Int64N(31)
		if s.Validate() == nil {
			return s
		}
	}
}

// refElem is one non-late element of the random stream.
type refElem struct {
	side Side
	el   *Element
	to   int64 // last watermark at which it can join a future element
	kept bool  // buffered on arrival
}

// refPair is a pair by the Seqs of its elements.
type refPair struct {
	Left, Right uint64
	Time        int64
}

func condOf(withCond bool) Condition {
	if !withCond {
		return nil
	}
	return func(l, r *Element) bool { return (l.Value.(int)+r.Value.(int))%3 != 0 }
}

func runRandomStream(t *testing.T, rng *rand.Rand, spec Spec, withCond bool) {
	cond := condOf(withCond)
	op, err := New(spec, cond)
	if err != nil {
		t.Fatal(err)
	}
	// The effective bounds, computed here from the definition.
	lo, hi := spec.Lower, spec.Upper
	if spec.LowerExclusive {
		lo++
	}
	if spec.UpperExclusive {
		hi--
	}
	reach := max(abs(lo), abs(hi))

	keys := make([]string, 1+rng.IntN(8))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	seen := make(map[string][]refElem)   // non-late elements by key, in arrival order
	bound := rng.Int64N(20)              // out-of-orderness of the watermark
	spread := bound + 1 + rng.Int64N(30) // some elements come later than that
	maxT := rng.Int64N(2000) - 1000
	// wm is the stream's watermark, opWM the largest the Operator was given,
	// advWM the last Advance.
	wm, opWM, advWM := int64(math.MinInt64), int64(math.MinInt64), int64(math.MinInt64)
	var got []refPair
	emit := func(p Pair) {
		if p.Time != max(p.Left.Time, p.Right.Time) {
			t.Fatalf("pair (%d, %d) has time %d", p.Left.Time, p.Right.Time, p.Time)
		}
		got = append(got, refPair{p.Left.Seq, p.Right.Seq, p.Time})
	}
	check := func(step string) {
		t.Helper()
		live, reachable := 0, 0
		for _, elems := range seen {
			for _, e := range elems {
				if e.kept && e.to >= advWM {
					live++
				}
				if advWM == math.MinInt64 || e.el.Time >= advWM-reach {
					reachable++
				}
			}
		}
		if op.Len() != live {
			t.Fatalf("%s: Len() = %d, want %d elements that can still join", step, op.Len(), live)
		}
		if op.Len() > reachable {
			t.Fatalf("%s: Len() = %d, more than the %d elements within %dms of watermark %d",
				step, op.Len(), reachable, reach, advWM)
		}
		checkInvariants(t, op)
	}
	pairs, late, peak := 0, 0, 0
	for i := range 3000 {
		maxT += rng.Int64N(4)
		if rng.IntN(4) == 0 {
			wm = max(wm, maxT-bound-1)
		}
		if rng.IntN(8) == 0 {
			advWM, opWM = max(advWM, wm), max(opWM, wm)
			op.Advance(wm)
			check(fmt.Sprintf("event %d: advance wm=%d", i, wm))
		}
		key := keys[rng.IntN(len(keys))]
		side := Side(rng.IntN(2))
		el := &Element{Time: maxT - rng.Int64N(spread), Seq: uint64(i + 1), Value: rng.IntN(10)}
		addWM := wm
		if rng.IntN(20) == 0 {
			addWM = math.MinInt64 // stale: the largest watermark so far counts
		}
		step := fmt.Sprintf("event %d: add key=%s side=%s t=%d wm=%d", i, key, side, el.Time, addWM)
		got = got[:0]
		accepted := op.Add(key, side, el, addWM, emit)
		opWM = max(opWM, addWM)
		effWM := opWM
		if want := el.Time >= effWM; accepted != want {
			t.Fatalf("%s: Add() = %v, want %v", step, accepted, want)
		}
		var want []refPair
		if accepted {
			var others []*Element
			for _, e := range seen[key] {
				if e.side == side {
					continue
				}
				l, r := el, e.el
				if side == Right {
					l, r = e.el, el
				}
				if d := r.Time - l.Time; d >= lo && d <= hi && (cond == nil || cond(l, r)) {
					others = append(others, e.el)
				}
			}
			slices.SortFunc(others, func(a, b *Element) int {
				return cmp.Or(cmp.Compare(a.Time, b.Time), cmp.Compare(a.Seq, b.Seq))
			})
			for _, x := range others {
				p := refPair{el.Seq, x.Seq, max(el.Time, x.Time)}
				if side == Right {
					p.Left, p.Right = x.Seq, el.Seq
				}
				want = append(want, p)
			}
			to := el.Time + hi
			if side == Right {
				to = el.Time - lo
			}
			seen[key] = append(seen[key], refElem{side: side, el: el, to: to, kept: to >= effWM})
		} else {
			late++
		}
		if len(want)+len(got) > 0 && !slices.Equal(want, got) {
			t.Fatalf("%s: pairs differ (-want +got):\n%s", step, gocmp.Diff(want, got))
		}
		pairs += len(got)
		check(step)
		peak = max(peak, op.Len())
	}
	advWM = math.MaxInt64
	op.Advance(math.MaxInt64)
	check("advance wm=max")
	if op.Len() != 0 || len(op.keys) != 0 || len(op.due) != 0 {
		t.Fatalf("after the maximum watermark: Len() = %d, %d keys, %d heap entries", op.Len(), len(op.keys), len(op.due))
	}
	t.Logf("3000 elements (%d late), %d pairs, at most %d buffered", late, pairs, peak)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// checkInvariants checks the Operator's internal structure: every key has a
// non-empty buffer; every buffer is sorted by (Time, Seq), holds only
// elements that can still join (relative to the last Advance), is in the
// heap iff it is not empty, with due the reach of its first element; the
// heap is ordered and its indexes are right; Len is the sum of the buffers.
func checkInvariants(t *testing.T, o *Operator) {
	t.Helper()
	n := 0
	for k, ks := range o.keys {
		if ks.key != k {
			t.Fatalf("key %q holds the state of %q", k, ks.key)
		}
		empty := 0
		for side := range ks.sides {
			b := &ks.sides[side]
			if b.ks != ks || b.side != Side(side) {
				t.Fatalf("key %q %s: buffer points at %q %s", k, Side(side), b.ks.key, b.side)
			}
			elems := b.elems[b.head:]
			n += len(elems)
			for _, el := range b.elems[:b.head] {
				if el != nil {
					t.Fatalf("key %q %s: dropped element %d still referenced", k, b.side, el.Seq)
				}
			}
			if !slices.IsSortedFunc(elems, func(x, y *Element) int {
				return cmp.Or(cmp.Compare(x.Time, y.Time), cmp.Compare(x.Seq, y.Seq))
			}) {
				t.Fatalf("key %q %s: buffer not sorted", k, b.side)
			}
			if len(elems) == 0 {
				empty++
				if b.idx != -1 {
					t.Fatalf("key %q %s: empty buffer at heap index %d", k, b.side, b.idx)
				}
				continue
			}
			if b.idx < 0 || b.idx >= len(o.due) || o.due[b.idx] != b {
				t.Fatalf("key %q %s: heap index %d is wrong", k, b.side, b.idx)
			}
			if _, to, _ := o.reach(b.side, elems[0].Time); to != b.due {
				t.Fatalf("key %q %s: due %d, first element reaches %d", k, b.side, b.due, to)
			}
			if b.due < o.swept {
				t.Fatalf("key %q %s: due %d is below the watermark %d", k, b.side, b.due, o.swept)
			}
		}
		if empty == 2 {
			t.Fatalf("key %q has nothing buffered", k)
		}
	}
	if n != o.n {
		t.Fatalf("Len() = %d, buffers hold %d", o.n, n)
	}
	for i := 1; i < len(o.due); i++ {
		if o.due[(i-1)/2].due > o.due[i].due {
			t.Fatalf("heap out of order at %d", i)
		}
	}
}
