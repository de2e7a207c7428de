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

// keyPieces returns what an incremental checkpoint of op writes: the
// header, the keys in increasing order, and each key's EncodeKey bytes.
func keyPieces(t testing.TB, op *Operator) (header []byte, keys []string, parts map[string][]byte) {
	t.Helper()
	var e codec.Encoder
	op.EncodeHeader(&e)
	keys = slices.Sorted(op.Keys)
	parts = make(map[string][]byte, len(keys))
	for _, key := range keys {
		parts[key] = encodeKeyState(t, op, key)
	}
	return e.Bytes(), keys, parts
}

// encodeKeyState returns op.EncodeKey(key) and fails t if it fails.
func encodeKeyState(t testing.TB, op *Operator, key string) []byte {
	t.Helper()
	var e codec.Encoder
	if err := op.EncodeKey(&e, key); err != nil {
		t.Fatalf("EncodeKey(%q): %v", key, err)
	}
	return e.Bytes()
}

// checkPieces checks that the header, then the key count, then each key's
// string and EncodeKey bytes in key order, are Encode's bytes, and that
// HasKey and the empty form agree with the keys.
func checkPieces(t testing.TB, op *Operator) {
	t.Helper()
	header, keys, parts := keyPieces(t, op)
	var e codec.Encoder
	e.Int(len(keys))
	got := append(header, e.Bytes()...)
	for _, key := range keys {
		if !op.HasKey(key) {
			t.Fatalf("HasKey(%q) = false for a key with windows", key)
		}
		var e codec.Encoder
		e.String(key)
		got = append(append(got, e.Bytes()...), parts[key]...)
	}
	if want := encodeState(t, op); !bytes.Equal(got, want) {
		t.Fatalf("EncodeHeader and EncodeKey per key differ from Encode:\n got %x\nwant %x", got, want)
	}
	if op.HasKey("absent") || !bytes.Equal(encodeKeyState(t, op, "absent"), []byte{0}) {
		t.Fatal("a key without state has state, or does not encode to the empty form")
	}
}

// restoreByKey restores what keyPieces returned into target with
// DecodeHeader and one DecodeKey per key, each from its own bytes, in a
// random order and with empty forms of absent keys among them, and checks
// that it encodes as want, the whole encoding of the same state. A key
// given twice must then be refused without a change.
func restoreByKey(t testing.TB, rng *rand.Rand, target *Operator, header []byte, keys []string, parts map[string][]byte, want []byte) {
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
			part = []byte{0}
		}
		d := codec.NewDecoder(part)
		if err := target.DecodeKey(d, key); err != nil {
			t.Fatalf("DecodeKey(%q): %v", key, err)
		}
		if err := d.Finish(); err != nil {
			t.Fatalf("DecodeKey(%q): %v", key, err)
		}
	}
	if target.HasKey("absent-1") || target.HasKey("absent-2") {
		t.Fatal("the empty form added a key")
	}
	if got := encodeState(t, target); !bytes.Equal(got, want) {
		t.Fatalf("restored key by key, the operator encodes differently:\n got %x\nwant %x", got, want)
	}
	if len(keys) > 0 {
		key := keys[rng.IntN(len(keys))]
		err := target.DecodeKey(codec.NewDecoder(parts[key]), key)
		if err == nil || !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "restored twice") {
			t.Fatalf("DecodeKey of a key restored already: %v", err)
		}
		if got := encodeState(t, target); !bytes.Equal(got, want) {
			t.Fatal("a refused DecodeKey changed the operator")
		}
	}
}

// TestKeyCodecDifferential checks the per-key encoding against the whole
// one along random streams (those of TestStateRestoreDifferential): at
// random cuts, the header and every key's String and EncodeKey bytes must
// be Encode's bytes; an operator restored from them with DecodeHeader and
// DecodeKey in a shuffled key order (sometimes one with state of its own,
// which DecodeHeader replaces) must encode as the original, and then give
// the same results, Add returns and Len for the rest of the stream.
func TestKeyCodecDifferential(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0xc0de))
	restoredWindows := 0
	for i := range 36 {
		spec := stateSpec(rng, Kind(1+i%3))
		aggs := stateAggSets[rng.IntN(len(stateAggSets))]
		t.Run(fmt.Sprintf("%d-%s", i, spec.Kind), func(t *testing.T) {
			t.Logf("%+v aggs=%v", spec, aggs)
			newOp := func() *Operator {
				op, err := New(spec, aggs)
				if err != nil {
					t.Fatal(err)
				}
				return op
			}
			steps := stateSteps(rng, len(aggs), 2000)
			cuts := map[int]bool{rng.IntN(len(steps)/10 + 1): true, rng.IntN(len(steps) + 1): true, len(steps): true}
			for range rng.IntN(4) {
				cuts[rng.IntN(len(steps)+1)] = true
			}
			a, b := newOp(), newOp()
			var gotA, gotB []Result
			emitA := func(r Result) { gotA = append(gotA, r) }
			emitB := func(r Result) { gotB = append(gotB, r) }
			for i := 0; i <= len(steps); i++ {
				if cuts[i] {
					checkPieces(t, a)
					header, keys, parts := keyPieces(t, a)
					target := newOp()
					if rng.IntN(3) == 0 {
						for _, s := range stateSteps(rng, len(aggs), 50) {
							s.run(target, func(Result) {})
						}
					}
					restoreByKey(t, rng, target, header, keys, parts, encodeState(t, a))
					if target.Len() != a.Len() {
						t.Fatalf("before step %d: restored Len() = %d, original %d", i, target.Len(), a.Len())
					}
					restoredWindows += target.Len()
					b = target
				}
				if i == len(steps) {
					break
				}
				s := steps[i]
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
				gotA, gotB = gotA[:0], gotB[:0]
			}
			a.Advance(math.MaxInt64, emitA)
			b.Advance(math.MaxInt64, emitB)
			if !sameResults(gotA, gotB) {
				t.Fatalf("advance wm=max: results differ\noriginal: %v\nrestored: %v", gotA, gotB)
			}
		})
		if t.Failed() {
			return
		}
	}
	if restoredWindows == 0 {
		t.Error("no window was restored key by key")
	}
}

// TestWatch runs random streams on an operator with a Watch hook that
// records EncodeKey of every key it reports, the first time in each call,
// and on one without. After every call, every key whose EncodeKey bytes
// changed (or that vanished) must have been reported, unless it is the key
// the caller added to; the bytes recorded first must be the key's bytes
// before the call; and the hook must not change what the operator does:
// both operators give the same results and encodings.
func TestWatch(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x3a7c))
	var reported, changed, vanished, firedOnly int
	for i := range 24 {
		spec := stateSpec(rng, Kind(1+i%3))
		aggs := stateAggSets[rng.IntN(len(stateAggSets))]
		t.Run(fmt.Sprintf("%d-%s", i, spec.Kind), func(t *testing.T) {
			t.Logf("%+v aggs=%v", spec, aggs)
			a, err := New(spec, aggs)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := New(spec, aggs)
			if err != nil {
				t.Fatal(err)
			}
			var first map[string][]byte
			a.Watch(func(key string) {
				if !a.HasKey(key) {
					t.Fatalf("key %q reported without state", key)
				}
				b := encodeKeyState(t, a, key)
				if _, ok := first[key]; !ok {
					first[key] = b
				}
			})
			var gotA, gotRef []Result
			emitA := func(r Result) { gotA = append(gotA, r) }
			emitRef := func(r Result) { gotRef = append(gotRef, r) }
			// Every step encodes every key twice: windows that are never
			// cleaned up would make that quadratic.
			n := 2000
			if spec.AllowedLateness > math.MaxInt64/2 {
				n = 300
			}
			steps := stateSteps(rng, len(aggs), n)
			steps = append(steps, stateStep{advance: true, wm: math.MaxInt64})
			for i, s := range steps {
				_, _, before := keyPieces(t, a)
				first = map[string][]byte{}
				okA, okRef := s.run(a, emitA), s.run(ref, emitRef)
				if okA != okRef || !sameResults(gotA, gotRef) {
					t.Fatalf("step %d (%s): the watched operator differs\nwatched:   %v %v\nunwatched: %v %v", i, s, okA, gotA, okRef, gotRef)
				}
				gotA, gotRef = gotA[:0], gotRef[:0]
				_, _, after := keyPieces(t, a)
				for key, b := range first {
					if !bytes.Equal(b, before[key]) {
						t.Fatalf("step %d (%s): key %q reported with %x, its state before was %x", i, s, key, b, before[key])
					}
				}
				reported += len(first)
				for key, b := range before {
					c, ok := after[key]
					if bytes.Equal(b, c) || !s.advance && key == s.key {
						continue
					}
					if _, ok := first[key]; !ok {
						t.Fatalf("step %d (%s): key %q changed unreported:\nbefore %x\n after %x", i, s, key, b, c)
					}
					changed++
					if !ok {
						vanished++
					} else if len(b) == len(c) {
						firedOnly++ // most likely a fired flag
					}
				}
				for key := range after {
					if _, ok := before[key]; !ok && (s.advance || key != s.key) {
						t.Fatalf("step %d (%s): key %q appeared", i, s, key)
					}
				}
				if i%101 == 0 && !bytes.Equal(encodeState(t, a), encodeState(t, ref)) {
					t.Fatalf("step %d (%s): the watched operator encodes differently", i, s)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
	t.Logf("%d reports, %d changed keys (%d vanished, %d same length)", reported, changed, vanished, firedOnly)
	if vanished == 0 || firedOnly == 0 {
		t.Errorf("the streams no longer change keys both ways: %d vanished, %d changed in place", vanished, firedOnly)
	}
}

// TestWatchNil checks that an operator can stop watching.
func TestWatchNil(t *testing.T) {
	op, err := New(Spec{Kind: Tumbling, Size: 10}, []Aggregate{{"n", Count}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	op.Watch(func(key string) { got = append(got, key) })
	op.Add("a", 1, nil, 0, func(Result) {})
	op.Add("b", 2, nil, 0, func(Result) {})
	op.Advance(9, func(Result) {}) // fires both windows, drops both keys
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("reported %q, want [a b]", got)
	}
	op.Watch(nil)
	op.Add("c", 12, nil, 9, func(Result) {})
	op.Advance(30, func(Result) {})
	if len(got) != 2 {
		t.Fatalf("reported %q after Watch(nil)", got[2:])
	}
}

// keyCorruptHeader returns the header of an operator of spec and aggs at
// watermark wm.
func keyCorruptHeader(t testing.TB, spec Spec, aggs []Aggregate, wm int64) []byte {
	t.Helper()
	op, err := New(spec, aggs)
	if err != nil {
		t.Fatal(err)
	}
	op.wm = wm
	var e codec.Encoder
	op.EncodeHeader(&e)
	return e.Bytes()
}

// checkKeyCorrupt decodes b, a damaged EncodeKey encoding of key "k", into
// an operator of spec restored from header that has a key of its own.
// DecodeKey must not panic; on error, the error wraps codec.ErrCorrupt and
// the operator keeps its state; if b is accepted, it must be the canonical
// encoding of a state the operator can run from.
func checkKeyCorrupt(t testing.TB, spec Spec, aggs []Aggregate, header, b []byte) (accepted bool) {
	t.Helper()
	op, err := New(spec, aggs)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.DecodeHeader(codec.NewDecoder(header)); err != nil {
		t.Fatal(err)
	}
	op.Add("existing", clampAdd(op.wm, 5), nil, op.wm, func(Result) {})
	before := encodeState(t, op)
	d := codec.NewDecoder(b)
	err = op.DecodeKey(d, "k")
	if err != nil {
		if after := encodeState(t, op); !bytes.Equal(after, before) {
			t.Fatalf("a failed DecodeKey (%v) changed the operator", err)
		}
	} else {
		err = d.Finish()
	}
	if err != nil {
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("DecodeKey error %v does not wrap codec.ErrCorrupt", err)
		}
		return false
	}
	if enc := encodeKeyState(t, op, "k"); !bytes.Equal(enc, b) {
		t.Fatalf("DecodeKey accepted a non-canonical encoding:\n in %x\nout %x", b, enc)
	}
	// What it added must pass Decode too: DecodeKey checks all Decode does.
	whole := encodeState(t, op)
	fresh, _ := New(spec, aggs)
	if err := decodeState(fresh, whole); err != nil {
		t.Fatalf("DecodeKey accepted a key Decode refuses: %v", err)
	}
	exerciseState(t, op)
	return true
}

// TestDecodeKeyCorrupt damages the EncodeKey bytes of the largest keys of
// sampled states: every truncation and a trailing byte must fail, and every
// single bit flip must either fail without changing the operator or give
// another valid key state.
func TestDecodeKeyCorrupt(t *testing.T) {
	encs, specs, aggs := sampleStates(t, 11, 400)
	for i, enc := range encs {
		t.Run(fmt.Sprintf("%d-%s", i, specs[i].Kind), func(t *testing.T) {
			op, err := New(specs[i], aggs[i])
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeState(op, enc); err != nil {
				t.Fatal(err)
			}
			header, keys, parts := keyPieces(t, op)
			slices.SortFunc(keys, func(a, b string) int { return len(parts[b]) - len(parts[a]) })
			rejected, flips := 0, 0
			for _, key := range keys[:min(len(keys), 2)] {
				part := parts[key]
				if !checkKeyCorrupt(t, specs[i], aggs[i], header, part) {
					t.Fatalf("DecodeKey refused key %q as it was encoded", key)
				}
				for n := range len(part) {
					if checkKeyCorrupt(t, specs[i], aggs[i], header, part[:n]) {
						t.Fatalf("DecodeKey accepted the first %d of %d bytes", n, len(part))
					}
				}
				if checkKeyCorrupt(t, specs[i], aggs[i], header, append(part[:len(part):len(part)], 0)) {
					t.Fatal("DecodeKey and Finish accepted a trailing byte")
				}
				b := make([]byte, len(part))
				for bit := range len(part) * 8 {
					copy(b, part)
					b[bit/8] ^= 1 << (bit % 8)
					flips++
					if !checkKeyCorrupt(t, specs[i], aggs[i], header, b) {
						rejected++
					}
				}
			}
			t.Logf("%d of %d bit flips rejected, the others are valid states", rejected, flips)
		})
	}
}

// TestDecodeKeyRejects: DecodeHeader refuses another definition or version
// with Decode's errors and leaves the operator as it was; DecodeKey refuses
// windows that do not fit the header's watermark, and a key restored
// twice; the empty form adds nothing.
func TestDecodeKeyRejects(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 10, Offset: 3, AllowedLateness: 5}
	aggs := []Aggregate{{"n", Count}}
	// One window [3, 13) with one element, fired or not.
	window := func(fired bool) []byte {
		var e codec.Encoder
		e.Int(1)
		e.Varint(3)
		e.Uvarint(10)
		e.Bool(fired)
		e.Uvarint(1)
		return e.Bytes()
	}
	newOp := func(spec Spec, aggs []Aggregate) *Operator {
		op, err := New(spec, aggs)
		if err != nil {
			t.Fatal(err)
		}
		op.Add("mine", 100, nil, 50, func(Result) {})
		return op
	}

	t.Run("header", func(t *testing.T) {
		header := keyCorruptHeader(t, spec, aggs, 0)
		for _, tt := range []struct {
			name string
			spec Spec
			aggs []Aggregate
			b    []byte
			want string
		}{
			{"other spec", Spec{Kind: Tumbling, Size: 10, Offset: 4, AllowedLateness: 5}, aggs, header, "window state was written for tumbling window (size=10 slide=0 offset=3 gap=0 lateness=5) with aggregates [count], not for"},
			{"other aggregates", spec, []Aggregate{{"s", Sum}}, header, "window state was written for"},
			{"other version", spec, aggs, append([]byte{stateVersion + 1}, header[1:]...), "version 2 is not supported"},
			{"truncated", spec, aggs, header[:len(header)-1], "corrupt"},
		} {
			op := newOp(tt.spec, tt.aggs)
			before := encodeState(t, op)
			err := op.DecodeHeader(codec.NewDecoder(tt.b))
			if err == nil || !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: DecodeHeader: %v, want an ErrCorrupt containing %q", tt.name, err, tt.want)
			}
			if !bytes.Equal(encodeState(t, op), before) {
				t.Errorf("%s: a failed DecodeHeader changed the operator", tt.name)
			}
		}
	})

	for _, tt := range []struct {
		name string
		wm   int64
		b    []byte
		want string // "" means accepted
	}{
		{"armed", 0, window(false), ""},
		{"fired at its end", 12, window(true), ""},
		{"not fired at its end", 12, window(false), "has not fired"},
		{"fired early", 11, window(true), "fired before"},
		{"past its cleanup time", 17, window(true), "outlived its cleanup time"},
		{"off the grid", 0, append([]byte{1, 8}, window(false)[2:]...), "is not a window"},
		{"truncated", 0, window(false)[:3], "corrupt"},
		{"empty", 0, nil, "corrupt"},
		{"count beyond the input", 0, []byte{9, 6, 20, 0, 2}, "exceeds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			op := newOp(spec, aggs)
			if err := op.DecodeHeader(codec.NewDecoder(keyCorruptHeader(t, spec, aggs, tt.wm))); err != nil {
				t.Fatal(err)
			}
			if op.HasKey("mine") || op.Len() != 0 {
				t.Fatal("DecodeHeader kept the operator's state")
			}
			before := encodeState(t, op)
			d := codec.NewDecoder(tt.b)
			err := op.DecodeKey(d, "k")
			if err == nil {
				err = d.Finish()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("DecodeKey: %v", err)
			case tt.want == "":
				if !op.HasKey("k") || op.Len() != 1 || !bytes.Equal(encodeKeyState(t, op, "k"), tt.b) {
					t.Fatal("DecodeKey did not restore the window")
				}
				d := codec.NewDecoder(tt.b)
				if err := op.DecodeKey(d, "k"); err == nil || !strings.Contains(err.Error(), `key "k" is restored twice`) || !errors.Is(err, codec.ErrCorrupt) {
					t.Fatalf("DecodeKey of a key restored already: %v", err)
				}
				exerciseState(t, op)
			case err == nil || !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), tt.want):
				t.Fatalf("DecodeKey: %v, want an ErrCorrupt containing %q", err, tt.want)
			case !bytes.Equal(encodeState(t, op), before) || op.HasKey("k"):
				t.Fatal("a failed DecodeKey changed the operator")
			}
		})
	}

	t.Run("empty form", func(t *testing.T) {
		op := newOp(spec, aggs)
		if err := op.DecodeHeader(codec.NewDecoder(keyCorruptHeader(t, spec, aggs, 0))); err != nil {
			t.Fatal(err)
		}
		d := codec.NewDecoder([]byte{0})
		if err := op.DecodeKey(d, "k"); err != nil || d.Finish() != nil {
			t.Fatalf("DecodeKey of the empty form: %v, %v", err, d.Finish())
		}
		if op.HasKey("k") || op.Len() != 0 || op.keys.len() != 0 {
			t.Fatal("the empty form added state")
		}
		// A key restored empty can be restored again.
		if err := op.DecodeKey(codec.NewDecoder(window(false)), "k"); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeKey decodes arbitrary bytes as the state of a key, against a
// header at watermark wm, with every definition in fuzzDefs: as for
// FuzzDecode, no input may make DecodeKey panic or leave the operator
// changed on error, and an accepted input must be canonical and describe a
// state the operator runs from.
func FuzzDecodeKey(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, def := range fuzzDefs {
		for _, n := range []int{5, 40} {
			op, err := New(def.spec, def.aggs)
			if err != nil {
				f.Fatal(err)
			}
			for _, s := range stateSteps(rng, len(def.aggs), n) {
				s.run(op, func(Result) {})
			}
			_, keys, parts := keyPieces(f, op)
			for _, key := range keys[:min(len(keys), 2)] {
				f.Add(op.wm, parts[key])
			}
		}
	}
	f.Fuzz(func(t *testing.T, wm int64, b []byte) {
		for _, def := range fuzzDefs {
			checkKeyCorrupt(t, def.spec, def.aggs, keyCorruptHeader(t, def.spec, def.aggs, wm), b)
		}
	})
}
