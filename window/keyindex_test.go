package window

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestKeyIndex runs random adds and removes against a map and a list of the
// keys in the order added: after every step the index finds exactly the
// keys held, each state knows its position, and all yields the states in
// the order they were added, through the compactions that removals cause,
// the shrinks an operator asks for and the room a restore reserves.
func TestKeyIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x keyIndex
	want := map[string]*keyState{}
	var order []*keyState // the states held, in the order added
	check := func(step int) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, x.len(), len(want))
		}
		got := slices.Collect(x.all())
		if !slices.Equal(got, order) {
			t.Fatalf("step %d: all yields %d states not in the order added (%d held)", step, len(got), len(order))
		}
		for i, ks := range x.states {
			if ks != nil && int(ks.pos) != i {
				t.Fatalf("step %d: state %q at %d says %d", step, ks.key, i, ks.pos)
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
			x.compact(true)
		case 2500:
			x.reserve(rng.IntN(6000)) // a restore's: keys stay where get finds them
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
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
