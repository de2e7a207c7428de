package join

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

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/vigil-cep/vigil/internal/codec"
)

// action is one call on an Operator: Advance(wm), or Add(key, side, el, wm).
type action struct {
	advance bool
	wm      int64
	key     string
	side    Side
	el      Element
}

// actionGen produces the random two-sided streams of TestRandomStream: keys
// k0..k7, times that grow with some disorder, a watermark trailing the
// largest time, Advance now and then, a stale watermark now and then.
type actionGen struct {
	rng           *rand.Rand
	keys          []string
	bound, spread int64
	maxT, wm      int64
	seq           uint64
}

func newActionGen(rng *rand.Rand) *actionGen {
	g := &actionGen{rng: rng, keys: make([]string, 1+rng.IntN(8)), wm: math.MinInt64}
	for i := range g.keys {
		g.keys[i] = fmt.Sprintf("k%d", i)
	}
	g.bound = rng.Int64N(20)
	g.spread = g.bound + 1 + rng.Int64N(30)
	g.maxT = rng.Int64N(2000) - 1000
	return g
}

func (g *actionGen) next() action {
	rng := g.rng
	g.maxT += rng.Int64N(4)
	if rng.IntN(4) == 0 {
		g.wm = max(g.wm, g.maxT-g.bound-1)
	}
	if rng.IntN(8) == 0 {
		return action{advance: true, wm: g.wm}
	}
	g.seq++
	a := action{
		wm:   g.wm,
		key:  g.keys[rng.IntN(len(g.keys))],
		side: Side(rng.IntN(2)),
		el:   Element{Time: g.maxT - rng.Int64N(g.spread), Seq: g.seq, Value: rng.IntN(10)},
	}
	if rng.IntN(20) == 0 {
		a.wm = math.MinInt64 // stale: the largest watermark so far counts
	}
	return a
}

// outcome is what one action observably did.
type outcome struct {
	accepted bool
	pairs    []flatPair
	len      int
}

// flatPair is a Pair by value, so that pairs of two Operators (which point
// at different Elements) compare equal when they are the same.
type flatPair struct {
	LTime  int64
	LSeq   uint64
	LValue any
	RTime  int64
	RSeq   uint64
	RValue any
	Time   int64
}

// apply runs a on op with a fresh copy of the element (an Element belongs
// to the Operator it is given to).
func apply(op *Operator, a action) outcome {
	var out outcome
	if a.advance {
		op.Advance(a.wm)
		out.accepted = true
	} else {
		el := a.el
		out.accepted = op.Add(a.key, a.side, &el, a.wm, func(p Pair) {
			out.pairs = append(out.pairs, flatPair{p.Left.Time, p.Left.Seq, p.Left.Value, p.Right.Time, p.Right.Seq, p.Right.Value, p.Time})
		})
	}
	out.len = op.Len()
	return out
}

// intEnc and intDec keep the test's int values ints (the codec's Value
// would give them back as int64, which condOf does not accept): a caller
// chooses how its values are written.
func intEnc(e *codec.Encoder, v any) error {
	e.Varint(int64(v.(int)))
	return nil
}

func intDec(d *codec.Decoder) any { return int(d.Varint()) }

func encodeOp(t testing.TB, op *Operator, enc func(*codec.Encoder, any) error) []byte {
	t.Helper()
	var e codec.Encoder
	if err := op.Encode(&e, enc); err != nil {
		t.Fatal(err)
	}
	return e.Bytes()
}

// restore decodes b into a fresh Operator for spec and checks that it used
// all of b and is well formed.
func restore(t testing.TB, spec Spec, cond Condition, b []byte, dec func(*codec.Decoder) any) *Operator {
	t.Helper()
	op, err := New(spec, cond)
	if err != nil {
		t.Fatal(err)
	}
	d := codec.NewDecoder(b)
	if err := op.Decode(d, dec); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	return op
}

// TestCheckpointRandom is a differential test of Encode and Decode: random
// streams (as in TestRandomStream) go into Operator A; at a random cut A is
// encoded and decoded into a fresh B, whose encoding must be A's byte for
// byte; then both get the same remaining calls and must agree on every
// Add result, every emitted Pair (order, times, seqs, values), Len, and
// their encodings, with B's internal invariants holding throughout. Lost
// lateness, a lost or reordered element, a wrong due time or a key dropped
// too early all show up as a difference.
func TestCheckpointRandom(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -join.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	const steps = 2000
	for i := range 60 {
		spec := randomSpec(rng)
		withCond := rng.IntN(2) == 0
		cut := rng.IntN(steps + 1)
		if i == 0 {
			cut = 0 // an Operator that has seen nothing
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("%+v condition=%v cut=%d", spec, withCond, cut)
			cond := condOf(withCond)
			a, err := New(spec, cond)
			if err != nil {
				t.Fatal(err)
			}
			g := newActionGen(rng)
			var b *Operator
			restored := 0
			for step := range steps {
				if step == cut {
					b = checkpoint(t, a, spec, cond)
					restored = a.Len()
				}
				act := g.next()
				ga := apply(a, act)
				if b == nil {
					continue
				}
				gb := apply(b, act)
				if !gocmp.Equal(ga, gb, gocmp.AllowUnexported(outcome{})) {
					t.Fatalf("step %d %+v: restored operator differs (-original +restored):\n%s",
						step, act, gocmp.Diff(ga, gb, gocmp.AllowUnexported(outcome{})))
				}
				checkInvariants(t, b)
				if step%50 == 0 || step == steps-1 {
					if ea, eb := encodeOp(t, a, intEnc), encodeOp(t, b, intEnc); !bytes.Equal(ea, eb) {
						t.Fatalf("step %d: encodings differ", step)
					}
				}
			}
			if b == nil {
				b = checkpoint(t, a, spec, cond)
			}
			// Draining must agree too: every key forgotten on both.
			apply(a, action{advance: true, wm: math.MaxInt64})
			apply(b, action{advance: true, wm: math.MaxInt64})
			if a.Len() != 0 || b.Len() != 0 || len(b.keys) != 0 || len(b.due) != 0 {
				t.Fatalf("after the maximum watermark: Len %d and %d, %d keys, %d heap entries", a.Len(), b.Len(), len(b.keys), len(b.due))
			}
			t.Logf("%d elements buffered at the cut", restored)
		})
	}
}

// checkpoint encodes a, decodes the bytes into a fresh Operator and checks
// that it encodes to the same bytes and is well formed.
func checkpoint(t *testing.T, a *Operator, spec Spec, cond Condition) *Operator {
	t.Helper()
	enc := encodeOp(t, a, intEnc)
	b := restore(t, spec, cond, enc, intDec)
	if got := encodeOp(t, b, intEnc); !bytes.Equal(got, enc) {
		t.Fatalf("re-encoding differs:\n%x\n%x", enc, got)
	}
	if b.Len() != a.Len() || len(b.keys) != len(a.keys) || len(b.due) != len(a.due) {
		t.Fatalf("restored Len %d, %d keys, %d heap entries; original %d, %d, %d",
			b.Len(), len(b.keys), len(b.due), a.Len(), len(a.keys), len(a.due))
	}
	checkInvariants(t, b)
	return b
}

// TestCheckpointEdges restores states at the edges of the int64 range and
// with JSON-like values through the default value codec, and checks that
// the restored Operator goes on exactly as the original.
func TestCheckpointEdges(t *testing.T) {
	type add struct {
		key  string
		side Side
		t    int64
		wm   int64
		v    any
	}
	tests := []struct {
		name  string
		spec  Spec
		adds  []add
		adv   int64 // Advance before the checkpoint (MinInt64: none)
		after []action
	}{
		{
			name: "unbounded range near both ends",
			spec: Spec{Lower: math.MinInt64, Upper: math.MaxInt64},
			adds: []add{
				{"a", Left, math.MinInt64, math.MinInt64, nil},
				{"a", Right, math.MaxInt64, math.MinInt64, "x"},
				{"", Left, 0, math.MinInt64, map[string]any{"n": []any{1.5, int64(-3), true, nil}}},
			},
			adv: math.MinInt64,
			after: []action{
				{key: "", side: Right, wm: 5, el: Element{Time: 5, Seq: 10, Value: "r"}},
				{key: "a", side: Right, wm: 5, el: Element{Time: 7, Seq: 11, Value: 2.5}},
				{advance: true, wm: math.MaxInt64},
				{key: "a", side: Left, wm: 0, el: Element{Time: math.MaxInt64, Seq: 12}},
			},
		},
		{
			name: "exclusive bounds, watermark given by Add only",
			spec: Spec{Lower: -2, Upper: 1, LowerExclusive: true, UpperExclusive: true},
			adds: []add{
				{"k", Left, 5, 3, int64(1)},
				{"k", Left, 4, 4, int64(2)},
				{"j", Right, 9, 4, int64(3)},
			},
			adv: math.MinInt64,
			after: []action{
				{key: "k", side: Right, wm: 0, el: Element{Time: 3, Seq: 10, Value: "late"}},
				{key: "k", side: Right, wm: 0, el: Element{Time: 4, Seq: 11, Value: "joins 4 and 5"}},
				{advance: true, wm: 5},
				{key: "k", side: Right, wm: 5, el: Element{Time: 5, Seq: 12, Value: "joins 5"}},
				{advance: true, wm: 6},
				{key: "k", side: Right, wm: 6, el: Element{Time: 6, Seq: 13, Value: "nothing"}},
			},
		},
		{
			name: "after an Advance that dropped a prefix",
			spec: Spec{Lower: 0, Upper: 3},
			adds: []add{
				{"k", Left, 1, 0, "a"}, {"k", Left, 2, 0, "b"}, {"k", Left, 10, 0, "c"},
				{"k", Right, 3, 0, "d"}, {"m", Right, 1, 0, "e"},
			},
			adv: 5,
			after: []action{
				{key: "k", side: Left, wm: 5, el: Element{Time: 6, Seq: 10, Value: "f"}},
				{key: "k", side: Right, wm: 5, el: Element{Time: 12, Seq: 11, Value: "g"}},
				{key: "m", side: Left, wm: 5, el: Element{Time: 5, Seq: 12, Value: "h"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range tt.adds {
				a.Add(x.key, x.side, &Element{Time: x.t, Seq: uint64(i + 1), Value: x.v}, x.wm, func(Pair) {})
			}
			if tt.adv != math.MinInt64 {
				a.Advance(tt.adv)
			}
			enc := encodeOp(t, a, nil)
			b := restore(t, tt.spec, nil, enc, nil)
			if got := encodeOp(t, b, nil); !bytes.Equal(got, enc) {
				t.Fatalf("re-encoding differs:\n%x\n%x", enc, got)
			}
			checkInvariants(t, b)
			for i, act := range tt.after {
				ga, gb := apply(a, act), apply(b, act)
				if !gocmp.Equal(ga, gb, gocmp.AllowUnexported(outcome{})) {
					t.Fatalf("action %d: differs (-original +restored):\n%s", i, gocmp.Diff(ga, gb, gocmp.AllowUnexported(outcome{})))
				}
				checkInvariants(t, b)
			}
			if !bytes.Equal(encodeOp(t, a, nil), encodeOp(t, b, nil)) {
				t.Fatal("encodings differ at the end")
			}
		})
	}
}

// TestCheckpointLayout pins the layout: a change to it breaks every saved
// checkpoint and must be deliberate.
func TestCheckpointLayout(t *testing.T) {
	op, err := New(Spec{Lower: -1, Upper: 2, UpperExclusive: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	op.Add("b", Right, &Element{Time: 3, Seq: 7, Value: "x"}, 1, func(Pair) {})
	op.Add("a", Left, &Element{Time: 2, Seq: 8, Value: nil}, 1, func(Pair) {})
	op.Add("a", Left, &Element{Time: 1, Seq: 9, Value: true}, 1, func(Pair) {})
	op.Advance(2) // keeps the left 1 (1+1 >= 2)
	want := []byte{
		0x01, 0x02, // lo -1, hi 1 (upper exclusive)
		0x04, 0x04, // wm 2, swept 2
		0x02,                                                      // two keys
		0x01, 'a', 0x02, 0x02, 0x09, 0x02, 0x04, 0x08, 0x00, 0x00, // "a": left (1#9 true) (2#8 null), right none
		0x01, 'b', 0x00, 0x01, 0x06, 0x07, 0x04, 0x01, 'x', // "b": left none, right (3#7 "x")
	}
	if got := encodeOp(t, op, nil); !bytes.Equal(got, want) {
		t.Fatalf("encoding\n%x\nwant\n%x", got, want)
	}
}

// TestDecodeRejects checks that Decode refuses state the Operator could
// not have produced, and state of other bounds, with errors that say so,
// and that a failed Decode leaves the Operator as it was.
func TestDecodeRejects(t *testing.T) {
	spec := Spec{Lower: 0, Upper: 10}
	type elem struct {
		t   int64
		seq uint64
	}
	type key struct {
		name        string
		left, right []elem
	}
	build := func(lo, hi, wm, swept int64, keys ...key) []byte {
		var e codec.Encoder
		e.Varint(lo)
		e.Varint(hi)
		e.Varint(wm)
		e.Varint(swept)
		e.Int(len(keys))
		for _, k := range keys {
			e.String(k.name)
			for _, side := range [][]elem{k.left, k.right} {
				e.Int(len(side))
				for _, el := range side {
					e.Varint(el.t)
					e.Uvarint(el.seq)
					_ = e.Value(nil)
				}
			}
		}
		return e.Bytes()
	}
	good := build(0, 10, 5, 5, key{"a", []elem{{1, 1}}, nil}, key{"b", nil, []elem{{6, 2}, {6, 3}}})
	if op := restore(t, spec, nil, good, nil); op.Len() != 3 {
		t.Fatalf("Len() = %d after restoring 3 elements", op.Len())
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"other bounds", build(0, 9, 5, 5), "state saved for bounds [0s, 9ms] cannot be restored into an operator with bounds [0s, 10ms]"},
		{"swept above watermark", build(0, 10, 5, 6), "swept watermark 6 above the watermark 5"},
		{"keys out of order", build(0, 10, 0, 0, key{"b", []elem{{1, 1}}, nil}, key{"a", []elem{{1, 2}}, nil}), `key "a" after "b"`},
		{"repeated key", build(0, 10, 0, 0, key{"a", []elem{{1, 1}}, nil}, key{"a", []elem{{1, 2}}, nil}), `key "a" after "a"`},
		{"empty key", build(0, 10, 0, 0, key{"a", nil, nil}), `key "a" has nothing buffered`},
		{"elements out of order", build(0, 10, 0, 0, key{"a", []elem{{2, 1}, {1, 2}}, nil}), "element 2@1 out of order"},
		{"equal time, seqs out of order", build(0, 10, 0, 0, key{"a", nil, []elem{{2, 5}, {2, 4}}}), "element 4@2 out of order"},
		{"left element that can join nothing", build(0, 10, 20, 20, key{"a", []elem{{9, 1}}, nil}), "element 1@9 can join nothing at watermark 20"},
		{"right element that can join nothing", build(0, 10, 20, 20, key{"a", nil, []elem{{19, 1}}}), "element 1@19 can join nothing at watermark 20"},
		{"count beyond the input", append(build(0, 10, 0, 0)[:4], 0x7f), "count 127 exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := restore(t, spec, nil, good, nil)
			before := encodeOp(t, op, nil)
			err := op.Decode(codec.NewDecoder(tt.b), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode error %v, want one containing %q", err, tt.want)
			}
			if tt.name != "other bounds" && !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("error %v does not wrap codec.ErrCorrupt", err)
			}
			if got := encodeOp(t, op, nil); !bytes.Equal(got, before) {
				t.Fatalf("a failed Decode changed the Operator")
			}
			checkInvariants(t, op)
		})
	}
	// Every proper prefix of a valid state is an error, never a panic.
	for n := range len(good) {
		op, _ := New(spec, nil)
		d := codec.NewDecoder(good[:n])
		if err := op.Decode(d, nil); err == nil {
			t.Fatalf("prefix of %d bytes decoded", n)
		}
		if op.Len() != 0 || len(op.keys) != 0 {
			t.Fatalf("prefix of %d bytes: a failed Decode changed the Operator", n)
		}
	}
}

// TestEncodeValueError checks that a value the codec cannot write fails
// Encode with the element named, rather than saving half the state.
func TestEncodeValueError(t *testing.T) {
	op, _ := New(Spec{Upper: 5}, nil)
	op.Add("k", Right, &Element{Time: 1, Seq: 3, Value: struct{}{}}, 0, func(Pair) {})
	var e codec.Encoder
	err := op.Encode(&e, nil)
	if err == nil || !strings.Contains(err.Error(), `key "k" right element 3@1`) {
		t.Fatalf("Encode error %v", err)
	}
	want := errors.New("boom")
	if err := op.Encode(&e, func(*codec.Encoder, any) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Encode error %v, want one wrapping %v", err, want)
	}
}

// fuzzSpec is the bounds FuzzDecode restores into: both signs, so that both
// sides' reach matters.
var fuzzSpec = Spec{Lower: -5, Upper: 10, LowerExclusive: true}

// FuzzDecode feeds arbitrary bytes to Decode. It must never panic; when it
// succeeds, the Operator must be well formed, re-encode to exactly the
// bytes it read (the layout is canonical), emit only pairs within the
// bounds, and drain to nothing at the maximum watermark.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, steps := range []int{0, 1, 5, 40, 300} {
		op, _ := New(fuzzSpec, nil)
		g := newActionGen(rng)
		for range steps {
			apply(op, g.next())
		}
		// Values through the default codec: ints come back as int64.
		f.Add(encodeOp(f, op, nil))
	}
	lo, hi, _ := fuzzSpec.effective()
	f.Fuzz(func(t *testing.T, data []byte) {
		op, err := New(fuzzSpec, func(l, r *Element) bool { return (l.Seq+r.Seq)%4 != 0 })
		if err != nil {
			t.Fatal(err)
		}
		d := codec.NewDecoder(data)
		if err := op.Decode(d, nil); err != nil {
			if op.Len() != 0 || len(op.keys) != 0 || op.wm != math.MinInt64 {
				t.Fatalf("a failed Decode (%v) changed the Operator", err)
			}
			return
		}
		checkInvariants(t, op)
		if d.Finish() == nil {
			if got := encodeOp(t, op, nil); !bytes.Equal(got, data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", data, got)
			}
		}
		keys := make([]string, 0, len(op.keys))
		for k := range op.keys {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		seq := uint64(math.MaxUint64 / 2)
		emit := func(p Pair) {
			if diff, _ := subSat(p.Right.Time, p.Left.Time); diff < lo || diff > hi {
				t.Fatalf("pair %d@%d, %d@%d out of bounds", p.Left.Seq, p.Left.Time, p.Right.Seq, p.Right.Time)
			}
		}
		for _, k := range keys {
			for _, side := range []Side{Left, Right} {
				seq++
				op.Add(k, side, &Element{Time: op.wm, Seq: seq}, op.wm, emit)
			}
		}
		checkInvariants(t, op)
		op.Advance(satAdd(op.wm, 3))
		checkInvariants(t, op)
		op.Advance(math.MaxInt64)
		if op.Len() != 0 || len(op.keys) != 0 || len(op.due) != 0 {
			t.Fatalf("after the maximum watermark: Len() = %d, %d keys", op.Len(), len(op.keys))
		}
	})
}

func satAdd(a, b int64) int64 {
	s, _ := addSat(a, b)
	return s
}
