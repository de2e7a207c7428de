package join

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/vigil-cep/vigil/internal/codec"
)

// keyPieces returns what an incremental checkpoint of op writes: the
// header, the keys in increasing order, and each key's EncodeKey bytes.
func keyPieces(t testing.TB, op *Operator, enc func(*codec.Encoder, any) error) (header []byte, keys []string, parts map[string][]byte) {
	t.Helper()
	var e codec.Encoder
	op.EncodeHeader(&e)
	keys = slices.Sorted(maps.Keys(op.keys))
	parts = make(map[string][]byte, len(keys))
	for _, key := range keys {
		parts[key] = encodeKeyOf(t, op, key, enc)
	}
	return e.Bytes(), keys, parts
}

// encodeKeyOf returns op.EncodeKey(key) and fails t if it fails.
func encodeKeyOf(t testing.TB, op *Operator, key string, enc func(*codec.Encoder, any) error) []byte {
	t.Helper()
	var e codec.Encoder
	if err := op.EncodeKey(&e, key, enc); err != nil {
		t.Fatalf("EncodeKey(%q): %v", key, err)
	}
	return e.Bytes()
}

// checkPieces checks that the header, then the key count, then each key's
// string and EncodeKey bytes in key order, are Encode's bytes, and that
// HasKey and the empty form agree with the keys.
func checkPieces(t testing.TB, op *Operator, enc func(*codec.Encoder, any) error) {
	t.Helper()
	header, keys, parts := keyPieces(t, op, enc)
	var e codec.Encoder
	e.Int(len(keys))
	got := append(header, e.Bytes()...)
	for _, key := range keys {
		if !op.HasKey(key) {
			t.Fatalf("HasKey(%q) = false for a key with elements", key)
		}
		var e codec.Encoder
		e.String(key)
		got = append(append(got, e.Bytes()...), parts[key]...)
	}
	if want := encodeOp(t, op, enc); !bytes.Equal(got, want) {
		t.Fatalf("EncodeHeader and EncodeKey per key differ from Encode:\n got %x\nwant %x", got, want)
	}
	if op.HasKey("absent") || !bytes.Equal(encodeKeyOf(t, op, "absent", enc), []byte{0, 0}) {
		t.Fatal("a key without state has state, or does not encode to the empty form")
	}
}

// restoreByKey restores what keyPieces returned into target with
// DecodeHeader and one DecodeKey per key, each from its own bytes, in a
// random order and with empty forms of absent keys among them, and checks
// that it encodes as want and is well formed. A key given twice must then
// be refused without a change.
func restoreByKey(t *testing.T, rng *rand.Rand, target *Operator, header []byte, keys []string, parts map[string][]byte, want []byte) {
	t.Helper()
	d := codec.NewDecoder(header)
	if err := target.DecodeHeader(d); err != nil {
		t.Fatalf("DecodeHeader: %v", err)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("DecodeHeader: %v", err)
	}
	order := append([]string{"absent-1", "absent-2"}, keys...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, key := range order {
		part, ok := parts[key]
		if !ok {
			part = []byte{0, 0}
		}
		d := codec.NewDecoder(part)
		if err := target.DecodeKey(d, key, intDec); err != nil {
			t.Fatalf("DecodeKey(%q): %v", key, err)
		}
		if err := d.Finish(); err != nil {
			t.Fatalf("DecodeKey(%q): %v", key, err)
		}
		checkInvariants(t, target)
	}
	if target.HasKey("absent-1") || target.HasKey("absent-2") {
		t.Fatal("the empty form added a key")
	}
	if got := encodeOp(t, target, intEnc); !bytes.Equal(got, want) {
		t.Fatalf("restored key by key, the operator encodes differently:\n got %x\nwant %x", got, want)
	}
	if len(keys) > 0 {
		key := keys[rng.IntN(len(keys))]
		err := target.DecodeKey(codec.NewDecoder(parts[key]), key, intDec)
		if err == nil || !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "restored twice") {
			t.Fatalf("DecodeKey of a key restored already: %v", err)
		}
		if got := encodeOp(t, target, intEnc); !bytes.Equal(got, want) {
			t.Fatal("a refused DecodeKey changed the operator")
		}
	}
}

// TestKeyCodecRandom checks the per-key encoding against the whole one
// along the random streams of TestCheckpointRandom: at random cuts, the
// header and every key's String and EncodeKey bytes must be Encode's
// bytes; an Operator restored from them with DecodeHeader and DecodeKey in
// a shuffled key order (sometimes one with state of its own, which
// DecodeHeader replaces) must encode as the original, stay well formed, and
// then agree with it on every Add result, pair and Len.
func TestKeyCodecRandom(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -join.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0xc0de))
	const steps = 2000
	restored := 0
	for i := range 40 {
		spec := randomSpec(rng)
		cond := condOf(rng.IntN(2) == 0)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("%+v condition=%v", spec, cond != nil)
			newOp := func() *Operator {
				op, err := New(spec, cond)
				if err != nil {
					t.Fatal(err)
				}
				return op
			}
			cuts := map[int]bool{rng.IntN(steps/10 + 1): true, rng.IntN(steps + 1): true, steps: true}
			for range rng.IntN(4) {
				cuts[rng.IntN(steps+1)] = true
			}
			a, b := newOp(), newOp()
			g := newActionGen(rng)
			for step := 0; ; step++ {
				if cuts[step] {
					checkPieces(t, a, intEnc)
					header, keys, parts := keyPieces(t, a, intEnc)
					target := newOp()
					if rng.IntN(3) == 0 {
						dirty := newActionGen(rng)
						for range 50 {
							apply(target, dirty.next())
						}
					}
					restoreByKey(t, rng, target, header, keys, parts, encodeOp(t, a, intEnc))
					if target.Len() != a.Len() {
						t.Fatalf("before step %d: restored Len() = %d, original %d", step, target.Len(), a.Len())
					}
					restored += target.Len()
					b = target
				}
				if step == steps {
					break
				}
				act := g.next()
				ga, gb := apply(a, act), apply(b, act)
				if !gocmp.Equal(ga, gb, gocmp.AllowUnexported(outcome{})) {
					t.Fatalf("step %d %+v: restored operator differs (-original +restored):\n%s",
						step, act, gocmp.Diff(ga, gb, gocmp.AllowUnexported(outcome{})))
				}
				checkInvariants(t, b)
			}
			apply(a, action{advance: true, wm: math.MaxInt64})
			apply(b, action{advance: true, wm: math.MaxInt64})
			if a.Len() != 0 || b.Len() != 0 || len(b.keys) != 0 || len(b.due) != 0 {
				t.Fatalf("after the maximum watermark: Len %d and %d, %d keys, %d heap entries", a.Len(), b.Len(), len(b.keys), len(b.due))
			}
		})
		if t.Failed() {
			return
		}
	}
	if restored == 0 {
		t.Error("no element was restored key by key")
	}
}

// TestWatch runs random streams on an Operator with a Watch hook that
// records EncodeKey of every key it reports, the first time in each call,
// and on one without. After every call, every key whose EncodeKey bytes
// changed (or that vanished) must have been reported, unless it is the key
// the caller added to; the bytes recorded first must be the key's bytes
// before the call; and the hook must not change what the Operator does.
func TestWatch(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -join.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x3a7c))
	var reported, changed, vanished int
	for i := range 30 {
		spec := randomSpec(rng)
		cond := condOf(rng.IntN(2) == 0)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("%+v condition=%v", spec, cond != nil)
			a, err := New(spec, cond)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := New(spec, cond)
			if err != nil {
				t.Fatal(err)
			}
			var first map[string][]byte
			a.Watch(func(key string) {
				if !a.HasKey(key) {
					t.Fatalf("key %q reported without state", key)
				}
				b := encodeKeyOf(t, a, key, intEnc)
				if _, ok := first[key]; !ok {
					first[key] = b
				}
			})
			g := newActionGen(rng)
			for i := range 2001 {
				act := g.next()
				if i == 2000 {
					act = action{advance: true, wm: math.MaxInt64}
				}
				_, _, before := keyPieces(t, a, intEnc)
				first = map[string][]byte{}
				ga, gr := apply(a, act), apply(ref, act)
				if !gocmp.Equal(ga, gr, gocmp.AllowUnexported(outcome{})) {
					t.Fatalf("step %d %+v: the watched operator differs (-watched +unwatched):\n%s",
						i, act, gocmp.Diff(ga, gr, gocmp.AllowUnexported(outcome{})))
				}
				_, _, after := keyPieces(t, a, intEnc)
				for key, b := range first {
					if !bytes.Equal(b, before[key]) {
						t.Fatalf("step %d %+v: key %q reported with %x, its state before was %x", i, act, key, b, before[key])
					}
				}
				reported += len(first)
				for key, b := range before {
					c, ok := after[key]
					if bytes.Equal(b, c) || !act.advance && key == act.key {
						continue
					}
					if _, ok := first[key]; !ok {
						t.Fatalf("step %d %+v: key %q changed unreported:\nbefore %x\n after %x", i, act, key, b, c)
					}
					changed++
					if !ok {
						vanished++
					}
				}
				for key := range after {
					if _, ok := before[key]; !ok && (act.advance || key != act.key) {
						t.Fatalf("step %d %+v: key %q appeared", i, act, key)
					}
				}
				if i%101 == 0 && !bytes.Equal(encodeOp(t, a, intEnc), encodeOp(t, ref, intEnc)) {
					t.Fatalf("step %d: the watched operator encodes differently", i)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
	t.Logf("%d reports, %d changed keys (%d vanished)", reported, changed, vanished)
	if vanished == 0 || changed == vanished {
		t.Errorf("the streams no longer change keys both ways: %d changed, %d vanished", changed, vanished)
	}
}

// TestWatchNil checks that an Operator can stop watching.
func TestWatchNil(t *testing.T) {
	op, err := New(Spec{Lower: 0, Upper: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	op.Watch(func(key string) { got = append(got, key) })
	op.Add("a", Left, &Element{Time: 1, Seq: 1}, 0, func(Pair) {})
	op.Add("b", Right, &Element{Time: 2, Seq: 2}, 0, func(Pair) {})
	op.Advance(10)
	if slices.Sort(got); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("reported %q, want [a b]", got)
	}
	op.Watch(nil)
	op.Add("c", Left, &Element{Time: 10, Seq: 3}, 10, func(Pair) {})
	op.Advance(20)
	if len(got) != 2 || op.Len() != 0 {
		t.Fatalf("reported %q after Watch(nil), Len %d", got[2:], op.Len())
	}
}

// header returns the header of an Operator of spec with watermarks wm and
// swept.
func header(t testing.TB, spec Spec, wm, swept int64) []byte {
	t.Helper()
	op, err := New(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	op.wm, op.swept = wm, swept
	var e codec.Encoder
	op.EncodeHeader(&e)
	return e.Bytes()
}

// TestDecodeKeyRejects checks that DecodeHeader refuses other bounds and
// a swept watermark above the watermark with Decode's errors, and that
// DecodeKey refuses state the Operator could not have produced, a key
// restored twice and truncated input, leaving the Operator as it was.
func TestDecodeKeyRejects(t *testing.T) {
	spec := Spec{Lower: 0, Upper: 10}
	type elem struct {
		t   int64
		seq uint64
	}
	key := func(left, right []elem) []byte {
		var e codec.Encoder
		for _, side := range [][]elem{left, right} {
			e.Int(len(side))
			for _, el := range side {
				e.Varint(el.t)
				e.Uvarint(el.seq)
				_ = e.Value(nil)
			}
		}
		return e.Bytes()
	}
	// mine is an Operator with state of its own, restored from a header at
	// watermark wm.
	mine := func(t *testing.T, wm int64) *Operator {
		op, err := New(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.DecodeHeader(codec.NewDecoder(header(t, spec, wm, wm))); err != nil {
			t.Fatal(err)
		}
		op.Add("mine", Left, &Element{Time: wm + 5, Seq: 100}, wm, func(Pair) {})
		return op
	}

	for _, tt := range []struct {
		name    string
		b       []byte
		want    string
		corrupt bool
	}{
		{"other bounds", header(t, Spec{Lower: 0, Upper: 9}, 5, 5), "state saved for bounds [0s, 9ms] cannot be restored into an operator with bounds [0s, 10ms]", false},
		{"swept above watermark", header(t, spec, 5, 6), "swept watermark 6 above the watermark 5", true},
		{"truncated", header(t, spec, 5, 5)[:3], "corrupt", true},
	} {
		t.Run("header "+tt.name, func(t *testing.T) {
			op := mine(t, 0)
			before := encodeOp(t, op, nil)
			err := op.DecodeHeader(codec.NewDecoder(tt.b))
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, codec.ErrCorrupt) != tt.corrupt {
				t.Fatalf("DecodeHeader: %v, want an error containing %q", err, tt.want)
			}
			if !bytes.Equal(encodeOp(t, op, nil), before) {
				t.Fatal("a failed DecodeHeader changed the Operator")
			}
		})
	}

	good := key([]elem{{1, 1}, {3, 2}}, []elem{{6, 3}})
	for _, tt := range []struct {
		name string
		wm   int64
		b    []byte
		want string
	}{
		{"elements out of order", 0, key([]elem{{2, 1}, {1, 2}}, nil), "element 2@1 out of order"},
		{"equal time, seqs out of order", 0, key(nil, []elem{{2, 5}, {2, 4}}), "element 4@2 out of order"},
		{"left element that can join nothing", 20, key([]elem{{9, 1}}, nil), "element 1@9 can join nothing at watermark 20"},
		{"right element that can join nothing", 20, key(nil, []elem{{19, 1}}), "element 1@19 can join nothing at watermark 20"},
		{"count beyond the input", 0, []byte{0x7f, 0}, "count 127 exceeds"},
		{"empty input", 0, nil, "corrupt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			op := mine(t, tt.wm)
			before := encodeOp(t, op, nil)
			err := op.DecodeKey(codec.NewDecoder(tt.b), "k", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("DecodeKey: %v, want an ErrCorrupt containing %q", err, tt.want)
			}
			if !bytes.Equal(encodeOp(t, op, nil), before) {
				t.Fatal("a failed DecodeKey changed the Operator")
			}
			checkInvariants(t, op)
		})
	}

	t.Run("valid, then twice", func(t *testing.T) {
		op := mine(t, 0)
		d := codec.NewDecoder(good)
		if err := op.DecodeKey(d, "k", nil); err != nil || d.Finish() != nil {
			t.Fatalf("DecodeKey: %v, %v", err, d.Finish())
		}
		checkInvariants(t, op)
		if op.Len() != 4 || !bytes.Equal(encodeKeyOf(t, op, "k", nil), good) {
			t.Fatalf("Len() = %d after restoring 3 elements next to 1", op.Len())
		}
		before := encodeOp(t, op, nil)
		err := op.DecodeKey(codec.NewDecoder(good), "k", nil)
		if err == nil || !strings.Contains(err.Error(), `key "k" restored twice`) || !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("DecodeKey of a key restored already: %v", err)
		}
		if !bytes.Equal(encodeOp(t, op, nil), before) {
			t.Fatal("a refused DecodeKey changed the Operator")
		}
		// Every proper prefix is an error, and leaves no trace.
		for n := range len(good) {
			op := mine(t, 0)
			before := encodeOp(t, op, nil)
			if err := op.DecodeKey(codec.NewDecoder(good[:n]), "k", nil); err == nil {
				t.Fatalf("prefix of %d bytes decoded", n)
			}
			if !bytes.Equal(encodeOp(t, op, nil), before) {
				t.Fatalf("prefix of %d bytes: a failed DecodeKey changed the Operator", n)
			}
		}
	})

	t.Run("empty form", func(t *testing.T) {
		op := mine(t, 0)
		before := encodeOp(t, op, nil)
		d := codec.NewDecoder([]byte{0, 0})
		if err := op.DecodeKey(d, "k", nil); err != nil || d.Finish() != nil {
			t.Fatalf("DecodeKey of the empty form: %v, %v", err, d.Finish())
		}
		if op.HasKey("k") || !bytes.Equal(encodeOp(t, op, nil), before) {
			t.Fatal("the empty form added state")
		}
	})
}

// FuzzDecodeKey feeds arbitrary bytes to DecodeKey, against a header with
// swept watermark swept, into an Operator with state of its own. It must
// never panic or change the Operator on error; when it succeeds, the
// Operator must be well formed, re-encode the key to exactly the bytes it
// read, and drain to nothing at the maximum watermark.
func FuzzDecodeKey(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, steps := range []int{1, 5, 40, 300} {
		op, _ := New(fuzzSpec, nil)
		g := newActionGen(rng)
		for range steps {
			apply(op, g.next())
		}
		_, keys, parts := keyPieces(f, op, nil)
		for _, key := range keys[:min(len(keys), 2)] {
			f.Add(op.swept, parts[key])
		}
	}
	f.Fuzz(func(t *testing.T, swept int64, data []byte) {
		op, err := New(fuzzSpec, func(l, r *Element) bool { return (l.Seq+r.Seq)%4 != 0 })
		if err != nil {
			t.Fatal(err)
		}
		if err := op.DecodeHeader(codec.NewDecoder(header(t, fuzzSpec, swept, swept))); err != nil {
			t.Fatal(err)
		}
		op.Add("existing", Right, &Element{Time: satAdd(swept, 1), Seq: 1}, swept, func(Pair) {})
		before := encodeOp(t, op, nil)
		d := codec.NewDecoder(data)
		if err := op.DecodeKey(d, "k", nil); err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("DecodeKey error %v does not wrap codec.ErrCorrupt", err)
			}
			if !bytes.Equal(encodeOp(t, op, nil), before) {
				t.Fatalf("a failed DecodeKey (%v) changed the Operator", err)
			}
			checkInvariants(t, op)
			return
		}
		checkInvariants(t, op)
		if d.Finish() == nil {
			if got := encodeKeyOf(t, op, "k", nil); !bytes.Equal(got, data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", data, got)
			}
		}
		// What it added must pass Decode too: DecodeKey checks all Decode does.
		fresh, _ := New(fuzzSpec, nil)
		if err := fresh.Decode(codec.NewDecoder(encodeOp(t, op, nil)), nil); err != nil {
			t.Fatalf("DecodeKey accepted a key Decode refuses: %v", err)
		}
		seq := uint64(math.MaxUint64 / 2)
		for _, side := range []Side{Left, Right} {
			seq++
			op.Add("k", side, &Element{Time: op.wm, Seq: seq}, op.wm, func(Pair) {})
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
