package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyTableModel runs random inserts, lookups and deletes against a Go
// map, over few enough keys that probes wrap around the table and runs of
// full slots form and break up (backward-shift deletion).
func TestKeyTableModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var kt keyTable
		kt.delete(&keyState{key: "none"}) // from an empty table: a no-op
		model := map[string]*keyState{}
		nkeys := 10 + rng.IntN(300)
		for op := range 5000 {
			key := fmt.Sprintf("k%d", rng.IntN(nkeys))
			h := keyHash(key)
			got := kt.get(key, h)
			if got != model[key] {
				t.Fatalf("seed %d op %d: get(%q) = %p, want %p", seed, op, key, got, model[key])
			}
			switch {
			case got == nil:
				ks := &keyState{key: key}
				kt.insert(ks, h)
				model[key] = ks
			case rng.IntN(2) == 0:
				kt.delete(got)
				delete(model, key)
				kt.delete(got) // again: not in the table, a no-op
			}
			if kt.len() != len(model) {
				t.Fatalf("seed %d op %d: len %d, want %d", seed, op, kt.len(), len(model))
			}
			if rng.IntN(100) == 0 {
				kt.reserve(rng.IntN(2 * nkeys)) // a restore's: keys stay where get finds them
			}
		}
		n := 0
		for ks := range kt.all() {
			if model[ks.key] != ks {
				t.Fatalf("seed %d: all yields %q, not in the model", seed, ks.key)
			}
			if kt.guess(keyHash(ks.key)) == nil {
				t.Fatalf("seed %d: guess(%q) = nil", seed, ks.key)
			}
			n++
		}
		if n != len(model) {
			t.Fatalf("seed %d: all yields %d keys, want %d", seed, n, len(model))
		}
	}
}

// TestKeyTableCollisions puts keys whose hashes share their low bits, all
// probing from the same slot, and deletes them in random order.
func TestKeyTableCollisions(t *testing.T) {
	var kt keyTable
	var keys []*keyState
	for i := 0; len(keys) < 40; i++ {
		key := fmt.Sprintf("c%d", i)
		if h := keyHash(key); h&63 == 60 { // all probe from slot 60 of 64, and wrap
			ks := &keyState{key: key}
			kt.insert(ks, h)
			keys = append(keys, ks)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for i, ks := range keys {
		kt.delete(ks)
		for _, rest := range keys[i+1:] {
			if kt.get(rest.key, keyHash(rest.key)) != rest {
				t.Fatalf("after %d deletes, %q is lost", i+1, rest.key)
			}
		}
		if kt.get(ks.key, keyHash(ks.key)) != nil {
			t.Fatalf("%q found after its delete", ks.key)
		}
	}
}
