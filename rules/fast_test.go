package rules

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vigil-cep/vigil/stream"
)

// TestFastPathDifferential holds the fast path (fast.go) to expr's VM:
// random conditions over random events, with fields of every type and
// missing, history features included, give the same result and the same
// error with the fast path and without it, the events given as maps or as
// slots (Fields).
func TestFastPathDifferential(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	atoms := []string{
		"a", "b", "s", "flag", "missing", "0", "1", "2", "2.5", "-1", `"x"`, `"y"`, "true", "false", "nil",
		`count(history("tx", "5m"), .a > 1)`, `count(history("tx", "5m"), .s == "x") >= 2`,
		`any(history("tx", "5m"), .a <= 2)`, `len(uniq(map(history("tx", "5m"), .s)))`,
		`len(history("tx", "1m"))`, `s in ["x", "y"]`, `a + 1`,
	}
	values := []any{nil, 0.0, 1.0, 2.0, 2.5, math.NaN(), 1, 3, "x", "y", "", true, false, []any{1.0}}
	var gen func(depth int) string
	gen = func(depth int) string {
		if depth > 2 || rng.IntN(3) == 0 {
			return atoms[rng.IntN(len(atoms))]
		}
		switch rng.IntN(4) {
		case 0:
			return "!(" + gen(depth+1) + ")"
		case 1:
			return "(" + gen(depth+1) + []string{" && ", " || ", " and ", " or "}[rng.IntN(4)] + gen(depth+1) + ")"
		default:
			return "(" + gen(depth+1) + []string{" == ", " != ", " < ", " <= ", " > ", " >= "}[rng.IntN(6)] + gen(depth+1) + ")"
		}
	}
	iterations := 4000
	if testing.Short() {
		iterations = 400
	}
	compared, fast := 0, 0
	for i := range iterations {
		when := gen(0)
		doc := fmt.Sprintf("streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: '%s'}\n", when)
		rs, err := Load([]byte(doc))
		if err != nil {
			continue // not a boolean condition, or refused: nothing to compare
		}
		past := &Recorded{}
		withFast, err := rs.NewEvaluator(past)
		if err != nil {
			t.Fatal(err)
		}
		vmOnly, err := rs.NewEvaluator(past)
		if err != nil {
			t.Fatal(err)
		}
		if withFast.when[0].fast != nil {
			fast++
		}
		vmOnly.when[0].fast = nil
		for k := range vmOnly.preds[0] { // element predicates too: the VM's marks

			vmOnly.preds[0][k].fast = nil
		}
		// slotted is e as the decoder gives an event of a stream with
		// DecodeFields: in slots.
		slotted := func(e map[string]any) Fields {
			names := rs.Streams[0].DecodeFields
			if names == nil {
				return MapFields(e)
			}
			f := Fields{Slots: make([]any, len(names)), Names: names}
			for i, n := range names {
				if v, ok := e[n]; ok {
					f.Slots[i] = v
				} else {
					f.Slots[i] = Absent
				}
			}
			return f
		}
		event := func() map[string]any {
			e := map[string]any{}
			for _, f := range []string{"a", "b", "s", "flag"} {
				if rng.IntN(5) > 0 {
					e[f] = values[rng.IntN(len(values))]
				}
			}
			return e
		}
		for range 4 {
			*past = Recorded{}
			for range rng.IntN(5) {
				e := event()
				m, errs := withFast.Mark(0, slotted(e))
				sm, serrs := vmOnly.Mark(0, MapFields(e))
				if mm, merrs := withFast.Mark(0, MapFields(e)); fmt.Sprint(m, errs) != fmt.Sprint(mm, merrs) {
					t.Fatalf("iteration %d (seed %d): %s: marks of %v differ: slots %+v %q, map %+v %q", i, seed, when, e, m, errs, mm, merrs)
				}
				if fmt.Sprint(m.Set, m.Failed, errs != nil) != fmt.Sprint(sm.Set, sm.Failed, serrs != nil) {
					t.Fatalf("iteration %d (seed %d): %s: marks of %v differ: fast %+v, VM %+v", i, seed, when, e, m, sm)
				}
				var v any = e
				if st := rs.Streams[0]; st.HistoryFields != nil {
					v = stream.NewRow(st.HistoryFields, e)
				}
				past.Add(v, m, errs)
			}
			cur := event()
			got, gerr := withFast.When(0, MapFields(cur))
			want, werr := vmOnly.When(0, MapFields(cur))
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("iteration %d (seed %d): %s over %v (history %v):\nfast: %v %v\nVM:   %v %v", i, seed, when, cur, past, got, gerr, want, werr)
			}
			got, gerr = withFast.When(0, slotted(cur))
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("iteration %d (seed %d): %s over %v in slots (history %v):\nfast: %v %v\nVM:   %v %v", i, seed, when, cur, past, got, gerr, want, werr)
			}
			compared++
		}
	}
	if fast < compared/40 {
		t.Fatalf("only %d of the conditions compared took the fast path: the test checks little", fast)
	}
	t.Logf("%d evaluations compared; %d conditions had a fast path", compared, fast)
}
