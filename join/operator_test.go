package join

import (
	"fmt"
	"testing"
)

// TestShrink checks that the key map and the heap are reallocated once they
// fall below a quarter of their peak, and that the Operator works on.
func TestShrink(t *testing.T) {
	op, err := New(Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	elems := make([]Element, n)
	for i := range elems {
		elems[i] = Element{Time: int64(i), Seq: uint64(i)}
		op.Add(fmt.Sprint(i), Left, &elems[i], 0, func(Pair) { t.Fatal("unexpected pair") })
	}
	if op.peak != n || cap(op.due) < n {
		t.Fatalf("peak %d, heap capacity %d after %d keys", op.peak, cap(op.due), n)
	}
	op.Advance(n / 4 * 3) // 500 keys left: a quarter, not below it
	if op.peak != n {
		t.Fatalf("peak %d after dropping to a quarter, want %d", op.peak, n)
	}
	op.Advance(n - 400)
	if op.Len() != 400 || len(op.keys) != 400 || op.peak != 400 || cap(op.due) >= n {
		t.Fatalf("after dropping to 400: Len() %d, %d keys, peak %d, heap capacity %d",
			op.Len(), len(op.keys), op.peak, cap(op.due))
	}
	checkInvariants(t, op)
	var got []Pair
	right := &Element{Time: n - 1, Seq: n}
	op.Add(fmt.Sprint(n-1), Right, right, n-400, func(p Pair) { got = append(got, p) })
	if len(got) != 1 || got[0].Left != &elems[n-1] || got[0].Right != right || got[0].Time != n-1 {
		t.Fatalf("pairs after shrinking: %+v", got)
	}
	checkInvariants(t, op)
}
