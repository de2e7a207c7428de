package window

import (
	"fmt"
	"math"
	"testing"
)

// TestWorkedExample is the example of docs/design.md "Lateness example" (also
// in testdata/worked_example).
func TestWorkedExample(t *testing.T) {
	for _, tt := range []struct {
		lateness   int64
		lateOK     bool
		lateFiring []Result
	}{
		{lateness: 0, lateOK: false},
		{lateness: 3, lateOK: true, lateFiring: []Result{{Key: "u1", Start: 0, End: 5, Values: []any{int64(2)}, Update: true}}},
	} {
		t.Run(fmt.Sprintf("L=%d", tt.lateness), func(t *testing.T) {
			op, err := New(Spec{Kind: Tumbling, Size: 5, AllowedLateness: tt.lateness}, []Aggregate{{"count", Count}})
			if err != nil {
				t.Fatal(err)
			}
			var got []Result
			emit := func(r Result) { got = append(got, r) }
			expect := func(step string, want ...Result) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s: fired %v, want %v", step, got, want)
				}
				got = nil
			}
			op.Add("u1", 2, nil, math.MinInt64, emit)
			op.Add("u1", 8, nil, math.MinInt64, emit)
			expect("add 2, 8")
			op.Advance(6, emit)
			expect("advance 6", Result{Key: "u1", Start: 0, End: 5, Values: []any{int64(1)}})
			if ok := op.Add("u1", 4, nil, 6, emit); ok != tt.lateOK {
				t.Errorf("Add(t=4, wm=6) = %v, want %v", ok, tt.lateOK)
			}
			expect("add 4", tt.lateFiring...)
			op.Advance(math.MaxInt64, emit)
			expect("advance max", Result{Key: "u1", Start: 5, End: 10, Values: []any{int64(1)}})
			if op.Len() != 0 {
				t.Errorf("Len() = %d after the maximum watermark", op.Len())
			}
		})
	}
}

// TestStateShrinks churns through many keys: once their windows are gone,
// the key map and the timer heap give their memory back.
func TestStateShrinks(t *testing.T) {
	op, err := New(Spec{Kind: Tumbling, Size: 10}, []Aggregate{{"n", Count}, {"d", CountDistinct}})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 5000
	fired := 0
	emit := func(Result) { fired++ }
	for round := range int64(5) {
		for i := range keys {
			op.Add(fmt.Sprintf("r%d-k%d", round, i), round*10, []any{nil, i}, round*10-1, emit)
		}
		if op.Len() != keys || op.keys.len() != keys {
			t.Fatalf("round %d: Len() = %d, %d keys; want %d", round, op.Len(), op.keys.len(), keys)
		}
		op.Advance(round*10+9, emit)
		if op.Len() != 0 || op.keys.len() != 0 {
			t.Fatalf("round %d: Len() = %d, %d keys after the windows closed", round, op.Len(), op.keys.len())
		}
		if op.keysPeak != 0 || cap(op.timers) != 0 {
			t.Fatalf("round %d: key map peak %d, timer heap capacity %d: memory not given back",
				round, op.keysPeak, cap(op.timers))
		}
	}
	if fired != 5*keys {
		t.Fatalf("%d windows fired, want %d", fired, 5*keys)
	}
}

// TestAddAllocs pins the hot path: an element for an existing tumbling
// window allocates nothing.
func TestAddAllocs(t *testing.T) {
	op, err := New(Spec{Kind: Tumbling, Size: 60_000}, []Aggregate{{"n", Count}, {"s", Sum}, {"m", Max}})
	if err != nil {
		t.Fatal(err)
	}
	emit := func(Result) { t.Fatal("nothing should fire") }
	args := []any{nil, 12.5, 3.0}
	op.Add("u1", 0, args, 0, emit)
	ts := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		ts++
		op.Add("u1", ts%60_000, args, 0, emit)
	}); n != 0 {
		t.Fatalf("Add allocates %v times per element, want 0", n)
	}
}
