package rules

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/expr-lang/expr/vm/runtime"

	"github.com/vigil-cep/vigil/stream"
)

func TestFeatureRewrite(t *testing.T) {
	const head = "streams:\n  tx: {key: u, time: ts, id: id, decide: true, max_history: 20}\nrules:\n  r: {stream: tx, action: block, when: '%s'}\n"
	tests := []struct {
		when      string
		rewritten bool
	}{
		{`count(history("tx", "5m"), .a <= 2) >= 5`, true},
		{`any(history("tx", "5m"), .s == "x")`, true},
		{`all(history("tx", "5m"), #.a > 0)`, true},
		{`none(history("tx", "5m"), .s in ["x", "y"])`, true},
		{`len(uniq(map(history("tx", "5m"), .s))) >= 3`, true},
		{`any(history("tx", "5m"), .a > a)`, false},     // reads the current event: cannot be precomputed
		{`count(history("tx", "5m"), .a) > 1`, false},   // not boolean
		{`any(history("tx", "5m"), len(.s) > 1)`, true}, // builtins over the element are fine
		{`any(history("tx", "5m"), any(.l, # > 1))`, false},
	}
	for _, tt := range tests {
		rs, err := Load([]byte(fmt.Sprintf(head, tt.when)))
		if err != nil {
			t.Fatalf("%s: %v", tt.when, err)
		}
		p, _, err := (&compiler{rs: rs, doc: rs.Doc}).compile(&rs.Rules[0].when, &Context{})
		if err != nil {
			t.Fatal(err)
		}
		dis := fmt.Sprint(p.Disassemble())
		if got := strings.Contains(dis, "_vigil_h"); got != tt.rewritten {
			t.Errorf("%s: rewritten %v, want %v", tt.when, got, tt.rewritten)
		}
	}
}

// TestFeatureRewriteDifferential holds the rewrite to expr's own evaluation:
// random rules over random histories (missing fields, wrong types, errors
// included) must give the same result and the same error with the rewrite on
// and off.
func TestFeatureRewriteDifferential(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	preds := []string{`.a <= 2`, `.a > 1`, `.s == "x"`, `.s != "y" && .a >= 1`, `!(.a < 2)`, `.s in ["x", "y"]`, `.a == nil`, `.s startsWith "x"`, `.a + 1 > 2`}
	shapes := []string{
		`count(history("tx", "5m"), %[1]s) %[2]s %[3]d`,
		`any(history("tx", "5m"), %[1]s) || %[3]d > 2`,
		`all(history("tx", "5m"), %[1]s) && "%[2]s%[4]s" != ""`,
		`none(history("tx", "5m"), %[1]s) == (%[3]d > 1)`,
		`len(uniq(map(history("tx", "5m"), .%[4]s))) %[2]s %[3]d`,
		// Two distinct fields: the first is kept in the marks (Mark.Inline), the second read from the rows.
		`len(uniq(map(history("tx", "5m"), .%[4]s))) + len(uniq(map(history("tx", "5m"), .b))) %[2]s %[3]d`,
	}
	ops := []string{">", ">=", "<", "<=", "==", "!="}
	// Strings of 15 bytes fit a Mark's inline value; longer ones are read from the row.
	values := []any{nil, 0.0, 1.0, 2.0, 3.0, "x", "y", "xy", true, "fifteen-bytes-x", "sixteen-bytes-xy", "sixteen-bytes-xz"}
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for i := range iterations {
		shape := shapes[rng.IntN(len(shapes))]
		when := fmt.Sprintf(shape, preds[rng.IntN(len(preds))], ops[rng.IntN(len(ops))], rng.IntN(4), []string{"a", "s"}[rng.IntN(2)])
		doc := fmt.Sprintf("streams:\n  tx: {key: u, time: ts, id: id, decide: true, max_history: 20}\nrules:\n  r: {stream: tx, action: block, when: '%s'}\n", when)
		fast, err := Load([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		slow, err := Load([]byte(doc), Features(false))
		if err != nil {
			t.Fatal(err)
		}
		var events []map[string]any
		for range rng.IntN(8) {
			e := map[string]any{}
			if v := values[rng.IntN(len(values))]; v != nil || rng.IntN(2) == 0 {
				e["a"] = v
			}
			if rng.IntN(4) > 0 {
				e["s"] = values[rng.IntN(len(values))]
			}
			if rng.IntN(4) > 0 {
				e["b"] = values[rng.IntN(len(values))]
			}
			events = append(events, e)
		}
		got := evalWith(t, fast, events)
		want := evalWith(t, slow, events)
		if got != want {
			t.Fatalf("iteration %d (seed %d): %s over %v:\nrewrite: %s\nexpr:    %s", i, seed, when, events, got, want)
		}
	}
}

// evalWith evaluates rs's only rule with history holding events, as the task
// would keep them (projected rows and marks).
func evalWith(t *testing.T, rs *Ruleset, events []map[string]any) string {
	t.Helper()
	past := &Recorded{}
	ev, err := rs.NewEvaluator(past)
	if err != nil {
		t.Fatal(err)
	}
	st := rs.Streams[0]
	for _, e := range events {
		var v any = e
		if st.HistoryFields != nil {
			v = stream.NewRow(st.HistoryFields, e)
		}
		m, errs := ev.Mark(0, MapFields(e))
		past.Add(v, m, errs)
	}
	ok, err := ev.When(0, MapFields(map[string]any{}))
	return fmt.Sprintf("%v %v", ok, err)
}

// TestDistinctSet holds distinctSet to expr's uniq(): the same count, with
// the switch to hashing after 16 values, numbers of both types, NaN and
// lists among them.
func TestDistinctSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	pool := []any{"a", "b", "", 1.0, 2.0, 1, int64(2), math.NaN(), nil, true, []any{1.0}, []any{1.0}, map[string]any{"x": 1.0}}
	for i := range 40 {
		pool = append(pool, fmt.Sprint("s", i), float64(i)+0.5)
	}
	for range 200 {
		d := distinctSet{onlyStrs: true}
		var kept []any
		for range rng.IntN(80) {
			v := pool[rng.IntN(len(pool))]
			s, isStr := v.(string)
			d.add(&distinctValue{s: s, isStr: isStr, v: v})
			if !slices.ContainsFunc(kept, func(k any) bool { return runtime.Equal(k, v) }) {
				kept = append(kept, v)
			}
		}
		if d.len() != len(kept) {
			t.Fatalf("distinct count %d, uniq() counts %d: %v", d.len(), len(kept), kept)
		}
	}
}
