package window

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/internal/codec"
)

// TestRandomLagging runs random streams through two operators: one that
// Advances, and one that Raises and then drains a random few windows at a
// time, catching keys up as they come. Every key must see the same
// firings in the same order, every element the same verdict, and whenever
// the lagging operator has drained it must hold the same state, byte for
// byte (docs/design.md "Firing in slices"). Keys of the lagging operator
// are also taken out at random (EncodeKey, RemoveKey) and given back late,
// after one or more Raises, with DecodeKeyAt the watermark they left at,
// as the engine does with a frozen key.
func TestRandomLagging(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^1))
	for i := range 60 {
		spec := randomSpec(rng)
		t.Run(fmt.Sprintf("%d-%s", i, spec.Kind), func(t *testing.T) {
			t.Logf("%+v", spec)
			runLagging(t, rng, spec)
		})
	}
}

func runLagging(t *testing.T, rng *rand.Rand, spec Spec) {
	eager, err := New(spec, allAggs)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := New(spec, allAggs)
	if err != nil {
		t.Fatal(err)
	}
	// Each key's firings, in order, from either operator.
	want, got := map[string][]Result{}, map[string][]Result{}
	emitTo := func(m map[string][]Result) func(Result) {
		return func(r Result) { m[r.Key] = append(m[r.Key], r) }
	}
	emitWant, emitGot := emitTo(want), emitTo(got)
	// The lagging operator reports a key before it changes it on its own,
	// as an incremental checkpoint needs (Watch): it must not fire a key's
	// window unreported since the last report. What Add does to its own key
	// is the caller's to know, so the test reports it itself.
	var reported, adding string
	lazy.Watch(func(key string) { reported = key })
	emitGot = func(r Result) {
		if r.Key != reported && r.Key != adding {
			t.Fatalf("key %s fired without being reported first (last reported: %q)", r.Key, reported)
		}
		got[r.Key] = append(got[r.Key], r)
	}
	keys := make([]string, 1+rng.IntN(12))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	bound := rng.Int64N(30)
	spread := bound + 1 + rng.Int64N(40)
	maxT := rng.Int64N(2000) - 1000
	wm := int64(math.MinInt64)
	drainSome := func() bool {
		n := rng.IntN(40)
		return lazy.Drain(emitGot, func() bool { n--; return n >= 0 })
	}
	type heldKey struct {
		state []byte
		wm    int64
	}
	held := map[string]heldKey{}
	giveBack := func(key string) {
		t.Helper()
		h, ok := held[key]
		if !ok {
			return
		}
		delete(held, key)
		if err := lazy.DecodeKeyAt(codec.NewDecoder(h.state), key, h.wm); err != nil {
			t.Fatalf("key %s back at watermark %d: %v", key, h.wm, err)
		}
	}
	takeOut := func() {
		key := keys[rng.IntN(len(keys))]
		if _, ok := held[key]; ok || !lazy.HasKey(key) || lazy.NextTimer(key) <= lazy.wm {
			return // held already, no state, or windows overdue: it stays
		}
		var e codec.Encoder
		if err := lazy.EncodeKey(&e, key); err != nil {
			t.Fatal(err)
		}
		lazy.RemoveKey(key)
		held[key] = heldKey{e.Bytes(), lazy.wm}
	}
	same := func(step string) {
		t.Helper()
		for key := range held {
			giveBack(key)
		}
		lazy.Drain(emitGot, nil)
		if lazy.Overdue() {
			t.Fatalf("%s: overdue after a full drain", step)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: firings differ (-eager +lagging):\n%s", step, gocmp.Diff(want, got))
		}
		if a, b := encodeState(t, eager), encodeState(t, lazy); !bytes.Equal(a, b) {
			t.Fatalf("%s: states differ after a full drain", step)
		}
		clear(want) // compared: from here on, what comes next
		clear(got)
	}
	for i := range 3000 {
		maxT += rng.Int64N(4)
		if rng.IntN(4) == 0 {
			wm = max(wm, maxT-bound-1-rng.Int64N(3*spread)) // sometimes a jump over many windows
		}
		if rng.IntN(10) == 0 {
			eager.Advance(wm, emitWant)
			lazy.Raise(wm)
			drainSome()
		}
		if rng.IntN(8) == 0 {
			takeOut()
		}
		key := keys[rng.IntN(len(keys))]
		giveBack(key) // before the key's next element
		ts, args := maxT-rng.Int64N(spread), randomArgs(rng)
		step := fmt.Sprintf("event %d: add key=%s t=%d wm=%d", i, key, ts, wm)
		a := eager.Add(key, ts, args, wm, emitWant)
		var b bool
		adding = key
		if key[len(key)-1]%2 == 0 {
			b = addKeyed(lazy, key, ts, args, wm, emitGot)
		} else {
			b = lazy.Add(key, ts, args, wm, emitGot)
		}
		adding = ""
		if a != b {
			t.Fatalf("%s: accepted %v eagerly, %v lagging", step, a, b)
		}
		// The key's firings so far are the same at once; others may wait.
		if !reflect.DeepEqual(want[key], got[key]) {
			t.Fatalf("%s: the key's firings differ (-eager +lagging):\n%s", step, gocmp.Diff(want[key], got[key]))
		}
		if rng.IntN(30) == 0 {
			same(step)
		}
	}
	eager.Advance(math.MaxInt64, emitWant)
	lazy.Raise(math.MaxInt64)
	for key := range held {
		giveBack(key)
	}
	for !drainSome() {
	}
	same("advance wm=max")
	if lazy.Len() != 0 || lazy.keys.len() != 0 {
		t.Fatalf("after the maximum watermark: Len() = %d, %d keys", lazy.Len(), lazy.keys.len())
	}
}
