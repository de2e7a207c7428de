package window

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestKeyIndex runs random adds and removes against a map and a list of the
// keys held: after every step the index finds exactly the keys held, each
// state knows its position, and all yields every state held once, through
// the holes that removals leave and adds fill, the shrinks an operator asks
// for and the room a restore reserves.
func TestKeyIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x keyIndex
	want := map[string]*keyState{}
	var order []*keyState // the states held
	byKey := func(a, b *keyState) int { return strings.Compare(a.key, b.key) }
	check := func(step int) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, x.len(), len(want))
		}
		got := slices.SortedFunc(x.all(), byKey)
		if !slices.Equal(got, slices.SortedFunc(slices.Values(order), byKey)) {
			t.Fatalf("step %d: all yields %d states, not the %d held", step, len(got), len(order))
		}
		holes := 0
		for i, ks := range x.states {
			if ks == nil {
				holes++
			} else if int(ks.pos) != i {
				t.Fatalf("step %d: state %q at %d says %d", step, ks.key, i, ks.pos)
			}
		}
		if holes != len(x.free) {
			t.Fatalf("step %d: %d holes, %d free positions", step, holes, len(x.free))
		}
		for _, p := range x.free {
			if x.states[p] != nil {
				t.Fatalf("step %d: free position %d holds %q", step, p, x.states[p].key)
			}
		}
	}
	for step := range 20_000 {
		key := fmt.Sprintf("k%d", rng.IntN(3000))
		switch ks := x.get(key); {
		case ks != want[key]:
			t.Fatalf("step %d: get(%q) = %p, want %p", step, key, ks, want[key])
		case ks == nil:
			ks = &keyState{key: key}
			x.add(ks)
			want[key] = ks
			order = append(order, ks)
		default:
			x.remove(ks)
			delete(want, key)
			order = slices.DeleteFunc(order, func(o *keyState) bool { return o == ks })
		}
		switch step % 5000 {
		case 4999:
			x.shrink()
		case 2500:
			x.reserve(rng.IntN(6000)) // a restore's: keys stay where get finds them
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	// Down to a few keys: a shrink now renumbers them, and adds go on.
	for _, ks := range slices.Clone(order[10:]) {
		x.remove(ks)
		delete(want, ks.key)
	}
	order = order[:10]
	x.shrink()
	if len(x.states) != 10 || len(x.free) != 0 {
		t.Fatalf("shrunk to 10 keys: %d positions, %d free", len(x.states), len(x.free))
	}
	check(-2)
	for i := range 5 {
		ks := &keyState{key: fmt.Sprintf("new%d", i)}
		x.add(ks)
		want[ks.key] = ks
		order = append(order, ks)
	}
	check(-3)
	for _, ks := range slices.Clone(order) {
		x.remove(ks)
	}
	if x.len() != 0 || x.get("k1") != nil || len(x.states) > minKeySlots {
		t.Fatalf("emptied: len %d, %d positions", x.len(), len(x.states))
	}
}

// TestKeySlotHasNoPointer: the table is what a Go map of the keys would
// be, and its point is that the collector does not scan it.
func TestKeySlotHasNoPointer(t *testing.T) {
	typ := reflect.TypeFor[keySlot]()
	for i := range typ.NumField() {
		switch k := typ.Field(i).Type.Kind(); k {
		case reflect.Uint64, reflect.Int32:
		default:
			t.Errorf("keySlot.%s is a %s: the collector would scan the table", typ.Field(i).Name, k)
		}
	}
}
