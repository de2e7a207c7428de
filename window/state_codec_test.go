package window

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/internal/codec"
)

// stateAggSets are the aggregate lists the checkpoint tests draw from: every
// aggregate; Count alone (windows without accumulators); several distinct
// sets; more than the four accumulators allocWindow packs with the window.
var stateAggSets = [][]Aggregate{
	allAggs,
	{{"n", Count}},
	{{"d", CountDistinct}, {"n", Count}, {"d2", CountDistinct}},
	{{"hi", Max}, {"s", Sum}, {"n", Count}, {"lo", Min}, {"m", Avg}, {"d", CountDistinct}, {"s2", Sum}},
}

// stateStep is one call of a recorded stream: Advance(wm), or Add(key, t,
// args, wm).
type stateStep struct {
	advance bool
	key     string
	t, wm   int64
	args    []any
}

func (s stateStep) String() string {
	if s.advance {
		return fmt.Sprintf("advance wm=%d", s.wm)
	}
	return fmt.Sprintf("add key=%s t=%d wm=%d args=%v", s.key, s.t, s.wm, s.args)
}

// stateSpec returns a random spec of kind k, usually with a positive allowed
// lateness (sometimes one so large that cleanup times saturate).
func stateSpec(rng *rand.Rand, k Kind) Spec {
	s := Spec{Kind: k}
	switch rng.IntN(8) {
	case 0:
		s.AllowedLateness = 0
	case 1:
		s.AllowedLateness = math.MaxInt64 - rng.Int64N(3)
	default:
		s.AllowedLateness = 1 + rng.Int64N(40)
	}
	switch k {
	case Tumbling:
		s.Size = 1 + rng.Int64N(40)
		s.Offset = rng.Int64N(2*s.Size-1) - (s.Size - 1)
	case Sliding:
		s.Size = 1 + rng.Int64N(40)
		s.Slide = 1 + rng.Int64N(s.Size)
		s.Offset = rng.Int64N(2*s.Slide-1) - (s.Slide - 1)
	case Session:
		s.Gap = 1 + rng.Int64N(30)
	}
	return s
}

// stateArg returns a random aggregate argument, with the values whose
// distinct keys and float bits are easy to get wrong: NaNs, -0, ±Inf,
// integral floats beyond int64, uint64 above math.MaxInt64, Go integer and
// float types that normalise to the same key, strings.
func stateArg(rng *rand.Rand) any {
	switch rng.IntN(24) {
	case 0:
		return nil
	case 1:
		return math.NaN()
	case 2:
		return math.Float64frombits(0x7ff8_0000_0000_0001) // another NaN
	case 3:
		return math.Copysign(0, -1)
	case 4:
		return 0.0
	case 5:
		return math.Inf(1 - 2*rng.IntN(2))
	case 6:
		return math.MaxUint64 - uint64(rng.IntN(2))
	case 7:
		return uint64(1 << 63)
	case 8:
		return float64(1 << 63) // uint64 key
	case 9:
		return 0x1p64 * float64(1+rng.IntN(2)) // a float key, though integral
	case 10:
		return int64(math.MinInt64)
	case 11:
		return float64(-(1 << 63)) // the int64 key math.MinInt64
	case 12:
		return int64(math.MaxInt64)
	case 13:
		return float64(rng.IntN(20)-10) + 0.5
	case 14:
		return []any{"not a number"}
	case 15:
		return rng.IntN(2) == 0
	case 16:
		return []any{int(3), int8(3), uint8(3), uint64(3), float32(3), int32(-2), uint16(7), uint(7), int16(-2), uint32(5)}[rng.IntN(10)]
	case 17, 18:
		return []string{"", "a", "b", "héllo", "\x00", "a\x00"}[rng.IntN(6)]
	case 19, 20:
		return float64(rng.IntN(20) - 10)
	}
	return int64(rng.IntN(20) - 10)
}

// clampAdd returns base+rel, saturated at the int64 limits.
func clampAdd(base, rel int64) int64 {
	switch {
	case rel > 0 && base > math.MaxInt64-rel:
		return math.MaxInt64
	case rel < 0 && base < math.MinInt64-rel:
		return math.MinInt64
	}
	return base + rel
}

// stateSteps records a random stream of n calls in the manner of
// TestRandomStream: a watermark with bounded out-of-orderness, elements later
// than that (late, or accepted within the allowed lateness, which bridges
// fired sessions), stale watermarks, and now and then a jump of the
// watermark. A third of the streams run at the int64 limits, where window
// bounds and cleanup times saturate.
func stateSteps(rng *rand.Rand, nAggs, n int) []stateStep {
	var base int64
	maxT := rng.Int64N(2000) - 1000
	switch rng.IntN(6) {
	case 0:
		// The first few hundred elements are at math.MinInt64.
		base, maxT = math.MinInt64+rng.Int64N(300), -200-rng.Int64N(1000)
	case 1:
		// Time reaches math.MaxInt64 somewhere in the stream.
		base = math.MaxInt64 - rng.Int64N(int64(n)*3/2+1)
	}
	keys := make([]string, 1+rng.IntN(12))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	bound := rng.Int64N(30)
	spread := bound + 1 + rng.Int64N(40)
	wm := int64(math.MinInt64)
	steps := make([]stateStep, 0, n)
	for len(steps) < n {
		maxT += rng.Int64N(4)
		switch rng.IntN(50) {
		case 0:
			wm = max(wm, clampAdd(base, maxT+rng.Int64N(60)))
		default:
			if rng.IntN(4) == 0 {
				wm = max(wm, clampAdd(base, maxT-bound-1))
			}
		}
		if rng.IntN(10) == 0 {
			steps = append(steps, stateStep{advance: true, wm: wm})
		}
		args := make([]any, nAggs)
		for i := range args {
			args[i] = stateArg(rng)
		}
		if rng.IntN(10) == 0 {
			args = args[:rng.IntN(len(args)+1)]
		}
		addWM := wm
		if rng.IntN(20) == 0 {
			addWM = math.MinInt64
		}
		steps = append(steps, stateStep{
			key:  keys[rng.IntN(len(keys))],
			t:    clampAdd(base, maxT-rng.Int64N(spread)),
			wm:   addWM,
			args: args,
		})
	}
	return steps
}

// run applies s to op and returns what Add returned (true for Advance).
func (s stateStep) run(op *Operator, emit func(Result)) bool {
	if s.advance {
		op.Advance(s.wm, emit)
		return true
	}
	return addKeyed(op, s.key, s.t, s.args, s.wm, emit)
}

// heldKeys are the Key handles addKeyed keeps per operator and key, across
// restores into the same operator: a handle taken before a restore must not
// reach the state the restore replaced.
var heldKeys = map[*Operator]map[string]*Key{}

// addKeyed is op.Add through a Key handle kept for op and key.
func addKeyed(op *Operator, key string, t int64, args []any, wm int64, emit func(Result)) bool {
	keys := heldKeys[op]
	if keys == nil {
		keys = map[string]*Key{}
		heldKeys[op] = keys
	}
	k := keys[key]
	if k == nil {
		k = new(Key)
		keys[key] = k
	}
	return op.AddKey(k, key, t, args, wm, emit)
}

// encodeState returns op's encoding and fails t if Encode fails.
func encodeState(t testing.TB, op *Operator) []byte {
	t.Helper()
	var e codec.Encoder
	if err := op.Encode(&e); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return e.Bytes()
}

// decodeState decodes b into op as a whole section.
func decodeState(op *Operator, b []byte) error {
	d := codec.NewDecoder(b)
	if err := op.Decode(d); err != nil {
		return err
	}
	return d.Finish()
}

// sameValue compares result values, floats by their bits: NaN is a value
// like any other here, and -0 is not 0.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

func sameResults(a, b []Result) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.Start != y.Start || x.End != y.End || x.Update != y.Update || len(x.Values) != len(y.Values) {
			return false
		}
		for j := range x.Values {
			if !sameValue(x.Values[j], y.Values[j]) {
				return false
			}
		}
	}
	return true
}

// stateCoverage counts what the differential test exercised after a
// restore, so that it fails if the streams stop reaching the cases that
// matter.
type stateCoverage struct {
	restores, restoredWindows, restoredFired, dirtyTargets int
	updates, late, bridges                                 int
	distinctTags                                           [distinctString + 1]int
	negZeroExtremes, saturated                             int
}

// tally counts the state op was restored to.
func (c *stateCoverage) tally(op *Operator) {
	c.restores++
	for ks := range op.keys.all() {
		for _, w := range ks.wins {
			c.restoredWindows++
			if w.fired {
				c.restoredFired++
			}
			if w.start == math.MinInt64 || w.end == math.MaxInt64 {
				c.saturated++
			}
			for i, k := range op.kinds {
				switch k {
				case CountDistinct:
					for v := range w.accs[i].set {
						tag, _ := distinctTag(v)
						c.distinctTags[tag]++
					}
				case Min, Max:
					if a := w.accs[i]; a.n > 0 && a.f == 0 && math.Signbit(a.f) {
						c.negZeroExtremes++
					}
				}
			}
		}
	}
}

// TestStateRestoreDifferential checkpoints an operator in the middle of a
// random stream and checks that the restored operator cannot be told from
// the original. For every window kind (tumbling with an offset, sliding,
// sessions), with allowed lateness and every aggregate, operator A runs the
// whole stream; a second operator runs it too, but at random cut points it
// is encoded and replaced by a fresh (or dirty) operator decoded from the
// bytes. At every cut both encodings must equal A's byte for byte; at every
// later step Add must return the same, emit the same results in the same
// order, with the same Update flags and float bits, and Len must agree.
func TestStateRestoreDifferential(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	var cov stateCoverage
	for i := range 48 {
		spec := stateSpec(rng, Kind(1+i%3))
		aggs := stateAggSets[rng.IntN(len(stateAggSets))]
		if i < 6 {
			aggs = allAggs
		}
		t.Run(fmt.Sprintf("%d-%s", i, spec.Kind), func(t *testing.T) {
			t.Logf("%+v aggs=%v", spec, aggs)
			steps := stateSteps(rng, len(aggs), 3000)
			// One cut early, while streams at math.MinInt64 still saturate.
			cuts := map[int]bool{rng.IntN(len(steps)/10 + 1): true, rng.IntN(len(steps) + 1): true}
			for range rng.IntN(4) {
				cuts[rng.IntN(len(steps)+1)] = true
			}
			runStateDifferential(t, rng, spec, aggs, steps, cuts, &cov)
		})
		if t.Failed() {
			return
		}
	}
	t.Logf("coverage: %+v", cov)
	for name, n := range map[string]int{
		"windows restored":                           cov.restoredWindows,
		"fired windows restored":                     cov.restoredFired,
		"restores into an operator with other state": cov.dirtyTargets,
		"update firings after a restore":             cov.updates,
		"late elements after a restore":              cov.late,
		"late elements bridging fired sessions":      cov.bridges,
		"min or max of -0 restored":                  cov.negZeroExtremes,
		"windows with saturated bounds restored":     cov.saturated,
		"NaN in a restored distinct set":             cov.distinctTags[distinctNaN],
		"false in a restored distinct set":           cov.distinctTags[distinctFalse],
		"true in a restored distinct set":            cov.distinctTags[distinctTrue],
		"int64 in a restored distinct set":           cov.distinctTags[distinctInt],
		"uint64 in a restored distinct set":          cov.distinctTags[distinctUint],
		"float64 in a restored distinct set":         cov.distinctTags[distinctFloat],
		"string in a restored distinct set":          cov.distinctTags[distinctString],
	} {
		if n == 0 {
			t.Errorf("no %s: the streams no longer cover it", name)
		}
	}
}

// runStateDifferential runs steps on an original operator and on one that
// is checkpointed and restored before each step i with cuts[i] (and at the
// end with cuts[len(steps)]), and compares them throughout.
func runStateDifferential(t *testing.T, rng *rand.Rand, spec Spec, aggs []Aggregate, steps []stateStep, cuts map[int]bool, cov *stateCoverage) {
	newOp := func() *Operator {
		op, err := New(spec, aggs)
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	a, b := newOp(), newOp()
	var gotA, gotB []Result
	emitA := func(r Result) { gotA = append(gotA, r) }
	emitB := func(r Result) { gotB = append(gotB, r) }
	restored := false
	for i := 0; i <= len(steps); i++ {
		if cuts[i] {
			want := encodeState(t, a)
			if enc := encodeState(t, b); !bytes.Equal(enc, want) {
				t.Fatalf("before step %d: the restored operator encodes differently from the original", i)
			}
			target := newOp()
			if rng.IntN(3) == 0 {
				// Decode replaces whatever state the operator had.
				for _, s := range stateSteps(rng, len(aggs), 50) {
					s.run(target, func(Result) {})
				}
				cov.dirtyTargets++
			}
			if err := decodeState(target, want); err != nil {
				t.Fatalf("before step %d: Decode: %v", i, err)
			}
			if enc := encodeState(t, target); !bytes.Equal(enc, want) {
				t.Fatalf("before step %d: Encode(Decode(b)) != b (%d bytes, %d bytes)", i, len(enc), len(want))
			}
			if target.Len() != a.Len() {
				t.Fatalf("before step %d: restored Len() = %d, original %d", i, target.Len(), a.Len())
			}
			b = target
			restored = true
			cov.tally(b)
		}
		if i == len(steps) {
			break
		}
		s := steps[i]
		var winsBefore int
		if ks := b.keys.get(s.key); ks != nil {
			winsBefore = len(ks.wins)
		}
		noAdvance := s.wm <= b.wm
		okA, okB := s.run(a, emitA), s.run(b, emitB)
		if okA != okB {
			t.Fatalf("step %d (%s): original returns %v, restored %v", i, s, okA, okB)
		}
		if !sameResults(gotA, gotB) {
			t.Fatalf("step %d (%s): results differ\noriginal: %v\nrestored: %v", i, s, gotA, gotB)
		}
		if a.Len() != b.Len() {
			t.Fatalf("step %d (%s): Len() original %d, restored %d", i, s, a.Len(), b.Len())
		}
		if restored {
			if !okB {
				cov.late++
			}
			for _, r := range gotB {
				if r.Update {
					cov.updates++
				}
			}
			// A session element that joined two or more sessions and
			// re-fired a fired one at once, with no watermark change in
			// between, bridged fired sessions.
			if ks := b.keys.get(s.key); spec.Kind == Session && !s.advance && noAdvance && ks != nil &&
				len(ks.wins) < winsBefore && len(gotB) > 0 && gotB[len(gotB)-1].Update {
				cov.bridges++
			}
		}
		if i%97 == 0 && !bytes.Equal(encodeState(t, a), encodeState(t, b)) {
			t.Fatalf("after step %d (%s): encodings differ", i, s)
		}
		gotA, gotB = gotA[:0], gotB[:0]
	}
	a.Advance(math.MaxInt64, emitA)
	b.Advance(math.MaxInt64, emitB)
	if !sameResults(gotA, gotB) {
		t.Fatalf("advance wm=max: results differ\noriginal: %v\nrestored: %v", gotA, gotB)
	}
	if a.Len() != 0 || b.Len() != 0 || b.keys.len() != 0 {
		t.Fatalf("after the maximum watermark: Len() original %d, restored %d", a.Len(), b.Len())
	}
}

// TestStateRestoreAtLimits checkpoints and restores before every step of
// streams at the int64 limits, where window bounds and cleanup times
// saturate and an element at math.MaxInt64 can get the empty window
// [MaxInt64, MaxInt64): for grids on which math.MaxInt64 is a window start
// and for grids on which it is not, and sessions.
func TestStateRestoreAtLimits(t *testing.T) {
	const lo, hi = math.MinInt64, math.MaxInt64
	args := func(i int) []any {
		return []any{nil, float64(i), math.Copysign(0, -1), math.NaN(), int64(i), []any{uint64(hi) + 1, math.NaN(), "x", 0.5}[i%4]}
	}
	add := func(key string, t, wm int64, i int) stateStep {
		return stateStep{key: key, t: t, wm: wm, args: args(i)}
	}
	steps := []stateStep{
		add("a", lo, lo, 0), add("a", lo+1, lo, 1), add("b", lo+7, lo, 2), add("c", lo, lo, 3),
		{advance: true, wm: lo + 2},
		add("a", lo, lo+2, 4), add("b", lo+3, lo+2, 5),
		{advance: true, wm: lo + 30},
		add("a", lo, lo+30, 6), add("c", 0, 0, 7),
		add("a", hi-20, 0, 8), add("a", hi, 0, 9), add("b", hi, 0, 10), add("c", hi-3, 0, 11), add("d", hi-1, 0, 12),
		{advance: true, wm: hi - 10},
		add("b", hi, hi-2, 13), add("a", hi-12, hi-2, 14),
		{advance: true, wm: hi - 1},
		add("a", hi, hi-1, 15), add("e", hi, hi-1, 16), add("d", hi-2, hi-1, 17),
		{advance: true, wm: hi},
		add("a", hi, hi, 18),
	}
	cuts := make(map[int]bool)
	for i := range len(steps) + 1 {
		cuts[i] = true
	}
	var cov stateCoverage
	for _, spec := range []Spec{
		{Kind: Tumbling, Size: 10, Offset: 7}, // math.MaxInt64 starts a window
		{Kind: Tumbling, Size: 10, Offset: 3}, // it does not
		{Kind: Sliding, Size: 10, Slide: 4, Offset: 3},
		{Kind: Sliding, Size: 10, Slide: 4, Offset: -2},
		{Kind: Session, Gap: 5},
	} {
		for _, lateness := range []int64{0, 5, hi} {
			spec.AllowedLateness = lateness
			t.Run(fmt.Sprintf("%s-offset=%d-lateness=%d", spec.Kind, spec.Offset, lateness), func(t *testing.T) {
				runStateDifferential(t, rand.New(rand.NewPCG(1, 2)), spec, allAggs, steps, cuts, &cov)
			})
		}
	}
	if cov.saturated == 0 {
		t.Error("no window with saturated bounds was restored")
	}
}

// sampleStates returns encodings of operators of several definitions in the
// middle of random streams, with their definitions: for each, the first
// state of at least size bytes (or the largest) of a few streams, so that
// the states are rich but small enough to flip every bit of.
func sampleStates(t testing.TB, seed uint64, size int) (encs [][]byte, specs []Spec, aggs [][]Aggregate) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range 6 {
		spec := stateSpec(rng, Kind(1+i%3))
		spec.AllowedLateness = 1 + rng.Int64N(40)
		ag := allAggs
		if i == 5 {
			ag = stateAggSets[1]
		}
		var enc []byte
		for range 10 {
			op, err := New(spec, ag)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stateSteps(rng, len(ag), 500) {
				s.run(op, func(Result) {})
				if b := encodeState(t, op); len(b) > len(enc) {
					enc = b
				}
				if len(enc) >= size {
					break
				}
			}
			if len(enc) >= size {
				break
			}
		}
		encs = append(encs, enc)
		specs = append(specs, spec)
		aggs = append(aggs, ag)
	}
	return encs, specs, aggs
}

// checkCorrupt decodes b, a damaged encoding, into an operator of spec that
// already has state. Decode must not panic; on error, the error wraps
// codec.ErrCorrupt and the operator keeps its state; if b is accepted, it
// must be the canonical encoding of a state the operator can run from.
func checkCorrupt(t testing.TB, spec Spec, aggs []Aggregate, b []byte) (accepted bool) {
	t.Helper()
	op, err := New(spec, aggs)
	if err != nil {
		t.Fatal(err)
	}
	op.Add("existing", 5, nil, math.MinInt64, func(Result) {})
	before := encodeState(t, op)
	d := codec.NewDecoder(b)
	err = op.Decode(d)
	if err != nil {
		if after := encodeState(t, op); !bytes.Equal(after, before) {
			t.Fatalf("a failed Decode (%v) changed the operator", err)
		}
	} else {
		// Bytes after the section are the caller's to reject.
		err = d.Finish()
	}
	if err != nil {
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("Decode error %v does not wrap codec.ErrCorrupt", err)
		}
		return false
	}
	if enc := encodeState(t, op); !bytes.Equal(enc, b) {
		t.Fatalf("Decode accepted a non-canonical encoding:\n in %x\nout %x", b, enc)
	}
	exerciseState(t, op)
	return true
}

// exerciseState runs op, decoded from untrusted bytes, to the end: elements
// at the bounds of its first windows (which update, merge and fire them),
// watermarks, and the maximum watermark, which must leave nothing behind.
// None of it may panic.
func exerciseState(t testing.TB, op *Operator) {
	t.Helper()
	emit := func(Result) {}
	args := make([]any, len(op.kinds))
	for i := range args {
		args[i] = 1.5
	}
	var probes []stateStep // collected first: Add changes the windows
	keys := slices.Sorted(op.Keys)
	for _, key := range keys[:min(len(keys), 3)] {
		wins := op.keys.get(key).wins
		for _, w := range wins[:min(len(wins), 2)] {
			for _, t := range []int64{w.start, w.end - 1, w.end} {
				probes = append(probes, stateStep{key: key, t: t, wm: op.wm, args: args})
			}
		}
	}
	probes = append(probes, stateStep{key: "new", t: op.wm, wm: op.wm, args: args},
		stateStep{advance: true, wm: clampAdd(op.wm, 10)})
	for _, p := range probes {
		p.run(op, emit)
	}
	op.Advance(math.MaxInt64, emit)
	if op.Len() != 0 || op.keys.len() != 0 {
		t.Fatalf("after the maximum watermark: Len() = %d, %d keys", op.Len(), op.keys.len())
	}
}

// TestDecodeCorrupt damages valid encodings: every truncation must fail
// (every count precedes what it counts, so no prefix is complete), a
// trailing byte must fail Finish, and every single bit flip must either
// fail with an error that leaves the operator as it was, or yield another
// valid state — the canonical encoding of a state the operator runs from
// without panicking. Only a checksum can tell such a state from the
// original: the checkpoint file has one (package state).
func TestDecodeCorrupt(t *testing.T) {
	encs, specs, aggs := sampleStates(t, 7, 400)
	for i, enc := range encs {
		t.Run(fmt.Sprintf("%d-%s", i, specs[i].Kind), func(t *testing.T) {
			if len(enc) < 100 {
				t.Fatalf("sample state is only %d bytes", len(enc))
			}
			for n := range len(enc) {
				if checkCorrupt(t, specs[i], aggs[i], enc[:n]) {
					t.Fatalf("Decode accepted the first %d of %d bytes", n, len(enc))
				}
			}
			if checkCorrupt(t, specs[i], aggs[i], append(enc[:len(enc):len(enc)], 0)) {
				t.Fatal("Decode and Finish accepted a trailing byte")
			}
			// The header (version, spec, aggregate kinds) names the
			// definition: no flip in it may pass.
			op, err := New(specs[i], aggs[i])
			if err != nil {
				t.Fatal(err)
			}
			var hdr codec.Encoder
			hdr.Uvarint(stateVersion)
			op.encodeSpec(&hdr)
			rejected, flips := 0, 0
			b := make([]byte, len(enc))
			for bit := range len(enc) * 8 {
				copy(b, enc)
				b[bit/8] ^= 1 << (bit % 8)
				flips++
				if !checkCorrupt(t, specs[i], aggs[i], b) {
					rejected++
				} else if bit/8 < len(hdr.Bytes()) {
					t.Fatalf("a flip of bit %d in the %d-byte header was accepted", bit, len(hdr.Bytes()))
				}
			}
			t.Logf("%d bytes: %d of %d bit flips rejected, the others are valid states", len(enc), rejected, flips)
		})
	}
}

// TestDecodeRejectsInvalidStates hand-crafts encodings that are well formed
// but describe states the operator cannot reach; each must be refused with
// an error naming the problem.
func TestDecodeRejectsInvalidStates(t *testing.T) {
	tumbling := Spec{Kind: Tumbling, Size: 10, Offset: 3, AllowedLateness: 5}
	tumblingAtMax := Spec{Kind: Tumbling, Size: 10, Offset: 7, AllowedLateness: 5} // math.MaxInt64 is on its grid
	sliding := Spec{Kind: Sliding, Size: 10, Slide: 4, Offset: 1, AllowedLateness: 5}
	session := Spec{Kind: Session, Gap: 10, AllowedLateness: 5}
	distinctOnly := []Aggregate{{"d", CountDistinct}}
	sumOnly := []Aggregate{{"s", Sum}}
	countOnly := []Aggregate{{"n", Count}}
	// win is one window as Encode writes it, after its start.
	type win struct {
		start, length int64
		fired         bool
		count         uint64
		accs          func(e *codec.Encoder)
	}
	encode := func(spec Spec, aggs []Aggregate, wm int64, key string, wins ...win) []byte {
		op, err := New(spec, aggs)
		if err != nil {
			t.Fatal(err)
		}
		var e codec.Encoder
		e.Uvarint(stateVersion)
		op.encodeSpec(&e)
		e.Varint(wm)
		e.Int(1)
		e.String(key)
		e.Int(len(wins))
		for i, w := range wins {
			if i == 0 {
				e.Varint(w.start)
			} else {
				e.Uvarint(uint64(w.start - wins[i-1].start))
			}
			e.Uvarint(uint64(w.length))
			e.Bool(w.fired)
			e.Uvarint(w.count)
			if w.accs != nil {
				w.accs(&e)
			}
		}
		return e.Bytes()
	}
	distinct := func(vals ...func(e *codec.Encoder)) func(e *codec.Encoder) {
		return func(e *codec.Encoder) {
			e.Int(len(vals))
			for _, v := range vals {
				v(e)
			}
		}
	}
	tagged := func(tag int, payload func(e *codec.Encoder)) func(e *codec.Encoder) {
		return func(e *codec.Encoder) {
			e.Uvarint(uint64(tag))
			if payload != nil {
				payload(e)
			}
		}
	}
	str := func(s string) func(e *codec.Encoder) {
		return tagged(distinctString, func(e *codec.Encoder) { e.String(s) })
	}
	for _, tt := range []struct {
		name string
		spec Spec
		aggs []Aggregate
		b    []byte
		want string // in the error; "" means the state is valid
	}{
		{"valid tumbling", tumbling, countOnly, encode(tumbling, countOnly, 0, "k", win{start: 3, length: 10, count: 1}), ""},
		{"valid saturated tumbling", tumbling, countOnly,
			encode(tumbling, countOnly, math.MinInt64, "k", win{start: math.MinInt64, length: 1, fired: true, count: 1}), ""},
		{"valid saturated sliding", sliding, countOnly,
			encode(sliding, countOnly, math.MinInt64, "k", win{start: math.MinInt64, length: 3, count: 1}), ""},
		{"tumbling off the grid", tumbling, countOnly, encode(tumbling, countOnly, 0, "k", win{start: 4, length: 10, count: 1}), "is not a window"},
		{"tumbling of the wrong size", tumbling, countOnly, encode(tumbling, countOnly, 0, "k", win{start: 3, length: 9, count: 1}), "is not a window"},
		{"saturated tumbling off the grid", tumbling, countOnly,
			encode(tumbling, countOnly, math.MinInt64, "k", win{start: math.MinInt64, length: 2, count: 1}), "is not a window"},
		{"sliding off the grid", sliding, countOnly, encode(sliding, countOnly, 0, "k", win{start: 3, length: 10, count: 1}), "is not a window"},
		{"session shorter than the gap", session, countOnly, encode(session, countOnly, 0, "k", win{start: 3, length: 9, count: 1}), "is not a window"},
		{"sessions that touch", session, countOnly,
			encode(session, countOnly, 0, "k", win{start: 3, length: 10, count: 1}, win{start: 13, length: 10, count: 1}), "meets session"},
		{"windows out of order", tumbling, countOnly,
			encode(tumbling, countOnly, 0, "k", win{start: 3, length: 10, count: 1}, win{start: 3, length: 10, count: 1}), "does not follow window"},
		{"window past its cleanup time", tumbling, countOnly,
			encode(tumbling, countOnly, 17, "k", win{start: 3, length: 10, fired: true, count: 1}), "outlived its cleanup time"},
		{"window not fired at its end", tumbling, countOnly,
			encode(tumbling, countOnly, 12, "k", win{start: 3, length: 10, count: 1}), "has not fired"},
		{"window fired early", tumbling, countOnly,
			encode(tumbling, countOnly, 11, "k", win{start: 3, length: 10, fired: true, count: 1}), "fired before"},
		{"session fired early", session, countOnly,
			encode(session, countOnly, 11, "k", win{start: 3, length: 10, fired: true, count: 1}), ""},
		{"valid empty session at the maximum", session, countOnly,
			encode(session, countOnly, 0, "k", win{start: math.MaxInt64, length: 0, count: 1}), ""},
		{"valid empty tumbling window at the maximum", tumblingAtMax, countOnly,
			encode(tumblingAtMax, countOnly, 0, "k", win{start: math.MaxInt64, length: 0, count: 1}), ""},
		{"empty tumbling window off the grid", tumbling, countOnly,
			encode(tumbling, countOnly, 0, "k", win{start: math.MaxInt64, length: 0, count: 1}), "is not a window"},
		{"empty window below the maximum", session, countOnly,
			encode(session, countOnly, 0, "k", win{start: 3, length: 0, count: 1}), "has length 0"},
		{"empty window", tumbling, countOnly, encode(tumbling, countOnly, 0, "k", win{start: 3, length: 10, count: 0}), "has 0 elements"},
		{"key without windows", tumbling, countOnly,
			append(encode(tumbling, countOnly, 0, "k"), make([]byte, 8)...), "no windows"},
		{"more sums than elements", tumbling, sumOnly,
			encode(tumbling, sumOnly, 0, "k", win{start: 3, length: 10, count: 1, accs: func(e *codec.Encoder) {
				e.Uvarint(2)
				e.Float64(1)
			}}), "arguments among"},
		{"valid distinct set", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 4,
				accs: distinct(tagged(distinctNaN, nil), tagged(distinctInt, func(e *codec.Encoder) { e.Varint(-1) }),
					tagged(distinctFloat, func(e *codec.Encoder) { e.Float64(0.5) }), str("a"))}), ""},
		{"distinct set larger than the window", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 1, accs: distinct(str("a"), str("b"))}), "among 1 elements"},
		{"distinct values repeated", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 2, accs: distinct(str("a"), str("a"))}), "does not follow"},
		{"distinct values out of order", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 2, accs: distinct(str("b"), str("a"))}), "does not follow"},
		{"distinct small uint64", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 1,
				accs: distinct(tagged(distinctUint, func(e *codec.Encoder) { e.Uvarint(5) }))}), "should be an int64"},
		{"distinct integral float", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 1,
				accs: distinct(tagged(distinctFloat, func(e *codec.Encoder) { e.Float64(2) }))}), "should not be a float64"},
		{"distinct NaN float", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 1,
				accs: distinct(tagged(distinctFloat, func(e *codec.Encoder) { e.Float64(math.NaN()) }))}), "should not be a float64"},
		{"distinct unknown tag", tumbling, distinctOnly,
			encode(tumbling, distinctOnly, 0, "k", win{start: 3, length: 10, count: 1, accs: distinct(tagged(distinctString+1, nil))}), "unknown distinct value tag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			op, err := New(tt.spec, tt.aggs)
			if err != nil {
				t.Fatal(err)
			}
			err = decodeState(op, tt.b)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tt.want == "":
				if enc := encodeState(t, op); !bytes.Equal(enc, tt.b) {
					t.Fatalf("Encode(Decode(b)) != b")
				}
				exerciseState(t, op)
			case err == nil:
				t.Fatalf("Decode accepted it, want an error containing %q", tt.want)
			case !strings.Contains(err.Error(), tt.want) || !errors.Is(err, codec.ErrCorrupt):
				t.Fatalf("Decode: %v, want an ErrCorrupt containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodeOtherDefinition: state is refused, with both definitions named,
// by an operator whose spec or aggregate kinds differ in any way, and state
// of another format version is refused as such.
func TestDecodeOtherDefinition(t *testing.T) {
	spec := Spec{Kind: Sliding, Size: 10, Slide: 5, Offset: 2, AllowedLateness: 7}
	aggs := []Aggregate{{"n", Count}, {"s", Sum}}
	op, err := New(spec, aggs)
	if err != nil {
		t.Fatal(err)
	}
	op.Add("k", 3, []any{nil, 1.5}, 0, func(Result) {})
	enc := encodeState(t, op)

	// Names are the caller's labels: they may change.
	renamed, _ := New(spec, []Aggregate{{"count", Count}, {"total", Sum}})
	if err := decodeState(renamed, enc); err != nil {
		t.Fatalf("renamed aggregates: %v", err)
	}
	for _, tt := range []struct {
		name string
		spec Spec
		aggs []Aggregate
	}{
		{"kind", Spec{Kind: Tumbling, Size: 10, Offset: 2, AllowedLateness: 7}, aggs},
		{"size", Spec{Kind: Sliding, Size: 11, Slide: 5, Offset: 2, AllowedLateness: 7}, aggs},
		{"slide", Spec{Kind: Sliding, Size: 10, Slide: 4, Offset: 2, AllowedLateness: 7}, aggs},
		{"offset", Spec{Kind: Sliding, Size: 10, Slide: 5, Offset: 1, AllowedLateness: 7}, aggs},
		{"lateness", Spec{Kind: Sliding, Size: 10, Slide: 5, Offset: 2, AllowedLateness: 8}, aggs},
		{"session gap", Spec{Kind: Session, Gap: 10}, aggs},
		{"aggregate kind", spec, []Aggregate{{"n", Count}, {"s", Avg}}},
		{"aggregate order", spec, []Aggregate{{"s", Sum}, {"n", Count}}},
		{"fewer aggregates", spec, aggs[:1]},
		{"more aggregates", spec, append(aggs[:2:2], Aggregate{"m", Max})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			other, err := New(tt.spec, tt.aggs)
			if err != nil {
				t.Fatal(err)
			}
			err = decodeState(other, enc)
			if err == nil || !strings.Contains(err.Error(), "window state was written for sliding window (size=10 slide=5 offset=2 gap=0 lateness=7) with aggregates [count sum], not for") {
				t.Fatalf("Decode: %v", err)
			}
		})
	}
	future := append([]byte{stateVersion + 1}, enc[1:]...)
	if err := decodeState(op, future); err == nil || !strings.Contains(err.Error(), "version 2 is not supported") {
		t.Fatalf("Decode of version 2: %v", err)
	}
}

// TestStateEncodingDeterministic: two operators that reached the same state
// along different paths (keys first seen in another order, distinct values
// added in another order, different map growth) encode to the same bytes,
// and so does one operator encoded twice.
func TestStateEncodingDeterministic(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 100, AllowedLateness: 10}
	vals := []any{"x", math.NaN(), uint64(math.MaxUint64), 0.25, true, false, int64(-3), "", math.Inf(-1), float64(1 << 63)}
	build := func(rng *rand.Rand) []byte {
		op, err := New(spec, allAggs)
		if err != nil {
			t.Fatal(err)
		}
		var adds [][2]int
		for k := range 40 {
			for v := range vals {
				adds = append(adds, [2]int{k, v})
			}
		}
		rng.Shuffle(len(adds), func(i, j int) { adds[i], adds[j] = adds[j], adds[i] })
		for _, a := range adds {
			// Min and Max get the same integral value everywhere, so that
			// their float results do not depend on the order either.
			op.Add(fmt.Sprintf("key-%d", a[0]), int64(a[1]), []any{nil, nil, 1.0, 1.0, nil, vals[a[1]]}, 0, func(Result) {})
		}
		b1, b2 := encodeState(t, op), encodeState(t, op)
		if !bytes.Equal(b1, b2) {
			t.Fatal("one operator encodes to different bytes twice")
		}
		return b1
	}
	want := build(rand.New(rand.NewPCG(1, 1)))
	for seed := range uint64(5) {
		if got := build(rand.New(rand.NewPCG(seed+2, 1))); !bytes.Equal(got, want) {
			t.Fatalf("insertion order %d changes the encoding", seed)
		}
	}
}

// fuzzDefs are the definitions FuzzDecode decodes every input with; its
// seeds are states of each.
var fuzzDefs = []struct {
	spec Spec
	aggs []Aggregate
}{
	{Spec{Kind: Tumbling, Size: 7, Offset: -3, AllowedLateness: 5}, allAggs},
	{Spec{Kind: Sliding, Size: 9, Slide: 4, Offset: 1, AllowedLateness: 6}, allAggs},
	{Spec{Kind: Session, Gap: 5, AllowedLateness: 8}, allAggs},
	{Spec{Kind: Tumbling, Size: 10}, []Aggregate{{"n", Count}}},
}

// FuzzDecode decodes arbitrary bytes with every definition in fuzzDefs: no
// input may make Decode panic or leave the operator changed on error, and
// an accepted input must be canonical and describe a state the operator
// runs from without panicking.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, def := range fuzzDefs {
		for _, n := range []int{0, 5, 40} {
			op, err := New(def.spec, def.aggs)
			if err != nil {
				f.Fatal(err)
			}
			for _, s := range stateSteps(rng, len(def.aggs), n) {
				s.run(op, func(Result) {})
			}
			f.Add(encodeState(f, op))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, def := range fuzzDefs {
			checkCorrupt(t, def.spec, def.aggs, b)
		}
	})
}
