package stream

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/codec"
)

var randomSeed = flag.Uint64("stream.seed", 0, "seed of the random checkpoint tests (0: from the clock)")

func encodeWatermarks(w *Watermarks) []byte {
	var e codec.Encoder
	w.Encode(&e)
	return e.Bytes()
}

// restoreWatermarks decodes b into a fresh tracker on clock and checks that
// it used all of b and re-encodes to it.
func restoreWatermarks(t testing.TB, clock Clock, b []byte) *Watermarks {
	t.Helper()
	w := NewWatermarks(clock)
	d := codec.NewDecoder(b)
	if err := w.Decode(d); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := encodeWatermarks(w); !bytes.Equal(got, b) {
		t.Fatalf("re-encoding differs:\n%x\n%x", b, got)
	}
	for _, in := range w.Inputs() {
		if got := w.Input(in.ID, WatermarkConfig{}); got != in {
			t.Fatalf("Input(%v) is not the restored input", in.ID)
		}
	}
	return w
}

// inputView is what a caller can see of an Input.
type inputView struct {
	ID                 InputID
	Watermark, MaxSeen int64
	Idle               bool
}

// view returns what a caller can see of w: Current (called once, as a task
// would) and every input in order.
func view(w *Watermarks) (int64, []inputView) {
	cur := w.Current()
	var ins []inputView
	for _, in := range w.Inputs() {
		ins = append(ins, inputView{in.ID, in.Watermark(), in.MaxSeen(), w.Idle(in)})
	}
	return cur, ins
}

// TestWatermarksRestore runs a scenario with idleness, RaiseStream and
// RaiseAll, restores the tracker, and checks that the restored one goes on
// exactly as the original, including a RaiseAll floor that must hold for an
// input first seen after the restore, and an input that turns idle on the
// clock across the restore.
func TestWatermarksRestore(t *testing.T) {
	cfgs := []WatermarkConfig{{MaxOutOfOrder: 5, IdleAfter: 100}, {MaxOutOfOrder: 0}, {MaxOutOfOrder: 2, IdleAfter: 30}}
	before := []step{
		{op: "event", stream: 0, partition: 1, t: 500, want: 494},
		{op: "event", stream: 0, partition: 0, t: 1000, want: 494},
		{op: "event", stream: 1, t: 300, want: 494},        // never goes back
		{op: "raise-all", t: 400, want: 494},               // activity on every input
		{op: "raise-stream", stream: 1, t: 600, want: 494}, // 0/1 holds the task at 494
		{op: "tick", t: 60},
		{op: "event", stream: 0, partition: 0, t: 1100, want: 494},
	}
	after := []step{
		// Stream 2 appears after the restore: the floor of 400 holds for it
		// (a tracker that lost it would put the input at 7).
		{op: "event", stream: 2, t: 10, want: 494},
		{op: "check-input", stream: 2, t: 400},
		{op: "tick", t: 30}, // stream 2 idle; 0/1 silent for 90 of its 100
		{op: "tick", t: 10}, // 0/1 idle on activity from before the restore: the task moves to 600
		{op: "check-current", t: 600},
		{op: "event", stream: 1, t: 2000, want: 1094},
		{op: "raise-all", t: 1500, want: 1500}, // activity on every input again
		{op: "check-input", stream: 3, t: 1500},
		{op: "event", stream: 0, partition: 1, t: 600, want: 1500},
		{op: "tick", t: 1000}, // everything idle but stream 1, which never is
		{op: "check-current", t: 1999},
		{op: "event", stream: 1, t: 3000, want: 2999},
	}
	clockA := &manualClock{now: 1_000_000}
	a := NewWatermarks(clockA)
	run := func(t *testing.T, w *Watermarks, clock *manualClock, s step, i int) {
		t.Helper()
		id := InputID{Stream: s.stream, Partition: s.partition}
		switch s.op {
		case "event":
			w.Observe(w.Input(id, cfgs[s.stream%len(cfgs)]), s.t)
		case "raise-stream":
			w.RaiseStream(s.stream, s.t)
		case "raise-all":
			w.RaiseAll(s.t)
		case "tick":
			clock.now += s.t
			return
		case "check-current":
			if got := w.Current(); got != s.t {
				t.Fatalf("step %d: watermark %d, want %d", i, got, s.t)
			}
			return
		case "check-input":
			if got := w.Input(id, cfgs[s.stream%len(cfgs)]).Watermark(); got != s.t {
				t.Fatalf("step %d: input %v watermark %d, want %d", i, id, got, s.t)
			}
			return
		}
		if got := w.Current(); got != s.want {
			t.Fatalf("step %d (%s t=%d): watermark %d, want %d", i, s.op, s.t, got, s.want)
		}
	}
	for i, s := range before {
		run(t, a, clockA, s, i)
	}
	clockB := &manualClock{now: clockA.now}
	b := restoreWatermarks(t, clockB, encodeWatermarks(a))
	for i, s := range after {
		run(t, a, clockA, s, i)
		run(t, b, clockB, s, i)
		ca, va := view(a)
		cb, vb := view(b)
		if ca != cb || !reflect.DeepEqual(va, vb) {
			t.Fatalf("step %d: original %d %+v\nrestored %d %+v", i, ca, va, cb, vb)
		}
	}
	if !bytes.Equal(encodeWatermarks(a), encodeWatermarks(b)) {
		t.Fatal("encodings differ at the end")
	}
	// Finish is state too.
	a.Finish()
	b = restoreWatermarks(t, clockB, encodeWatermarks(a))
	if got := b.Current(); got != MaxTime {
		t.Fatalf("after restoring a finished tracker, Current = %d", got)
	}
}

// TestWatermarksRandom is a differential test: random observations,
// explicit watermarks, RaiseStream, RaiseAll and clock moves over several
// streams and partitions (some with idleness) go into tracker A; at a random
// cut A is restored into B on its own clock at the same reading; then both
// get the same calls and clock moves, and must agree on Current and on
// every input's watermark, largest time and idleness after every step, and
// on their encodings. Some inputs first appear after the cut. Callers keep
// Input pointers, so B's are taken from B.Input after the restore, as a
// restarted task would.
func TestWatermarksRandom(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -stream.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	const steps = 1500
	for run := range 50 {
		cfgs := make([]WatermarkConfig, 5)
		for i := range cfgs {
			cfgs[i] = WatermarkConfig{MaxOutOfOrder: rng.Int64N(20), IdleAfter: []int64{0, 0, 40, 150}[rng.IntN(4)]}
		}
		cut := rng.IntN(steps + 1)
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			clockA := &manualClock{now: rng.Int64N(1 << 40)}
			var clockB *manualClock
			a := NewWatermarks(clockA)
			var b *Watermarks
			// Inputs as a caller keeps them, per tracker.
			inA, inB := map[InputID]*Input{}, map[InputID]*Input{}
			get := func(w *Watermarks, cache map[InputID]*Input, id InputID) *Input {
				in := cache[id]
				if in == nil {
					in = w.Input(id, cfgs[id.Stream])
					cache[id] = in
				}
				return in
			}
			maxT := rng.Int64N(10000)
			for i := range steps {
				if i == cut {
					clockB = &manualClock{now: clockA.now}
					b = restoreWatermarks(t, clockB, encodeWatermarks(a))
				}
				// Streams 3 and 4 and partition 2 appear only after the cut.
				streams, parts := 3, 2
				if i >= cut {
					streams, parts = 5, 3
				}
				id := InputID{Stream: rng.IntN(streams), Partition: int32(rng.IntN(parts))}
				maxT += rng.Int64N(5)
				var do func(w *Watermarks, cache map[InputID]*Input, clock *manualClock)
				switch r := rng.IntN(100); {
				case r < 60:
					et := maxT - rng.Int64N(30)
					do = func(w *Watermarks, c map[InputID]*Input, _ *manualClock) { w.Observe(get(w, c, id), et) }
				case r < 70:
					wm := maxT - rng.Int64N(50)
					do = func(w *Watermarks, c map[InputID]*Input, _ *manualClock) { w.Raise(get(w, c, id), wm) }
				case r < 74:
					wm := maxT - rng.Int64N(50)
					do = func(w *Watermarks, _ map[InputID]*Input, _ *manualClock) { w.RaiseStream(id.Stream, wm) }
				case r < 76:
					wm := maxT - rng.Int64N(100)
					do = func(w *Watermarks, _ map[InputID]*Input, _ *manualClock) { w.RaiseAll(wm) }
				case r < 77 && rng.IntN(100) == 0:
					do = func(w *Watermarks, _ map[InputID]*Input, _ *manualClock) { w.Finish() }
				default:
					dt := rng.Int64N(60)
					do = func(_ *Watermarks, _ map[InputID]*Input, c *manualClock) { c.now += dt }
				}
				// Current is not called after every step, as in a task that
				// reads it per batch: its laziness must survive too.
				callCurrent := rng.IntN(3) == 0
				do(a, inA, clockA)
				if callCurrent {
					a.Current()
				}
				if b == nil {
					continue
				}
				do(b, inB, clockB)
				if callCurrent {
					b.Current()
				}
				if i%25 == 0 {
					if ea, eb := encodeWatermarks(a), encodeWatermarks(b); !bytes.Equal(ea, eb) {
						t.Fatalf("step %d: encodings differ\n%x\n%x", i, ea, eb)
					}
				}
				ca, va := view(a)
				cb, vb := view(b)
				if ca != cb || !reflect.DeepEqual(va, vb) {
					t.Fatalf("step %d: original %d %+v\nrestored %d %+v", i, ca, va, cb, vb)
				}
			}
			if b == nil {
				restoreWatermarks(t, &manualClock{now: clockA.now}, encodeWatermarks(a))
			}
		})
	}
}

// TestWatermarksLayout pins the layout: a change breaks saved checkpoints
// and must be deliberate.
func TestWatermarksLayout(t *testing.T) {
	w := NewWatermarks(&manualClock{now: 3})
	w.Observe(w.Input(InputID{Stream: 1, Partition: -1}, WatermarkConfig{MaxOutOfOrder: 2, IdleAfter: 5}), 10)
	w.RaiseAll(4)
	w.Current()
	want := []byte{
		0x0e, 0x08, // current 7, floor 4
		0x01,       // one input
		0x02, 0x01, // stream 1, partition -1
		0x04, 0x0a, // MaxOutOfOrder 2, IdleAfter 5
		0x14, 0x08, 0x06, // maxSeen 10, explicit 4, lastActive 3
	}
	if got := encodeWatermarks(w); !bytes.Equal(got, want) {
		t.Fatalf("encoding\n%x\nwant\n%x", got, want)
	}
}

// TestWatermarksDecodeRejects checks that Decode refuses state the tracker
// could not have produced, and that a failed Decode leaves it unchanged.
func TestWatermarksDecodeRejects(t *testing.T) {
	type in struct{ stream, partition, explicit int64 }
	build := func(floor int64, ins ...in) []byte {
		var e codec.Encoder
		e.Varint(0)
		e.Varint(floor)
		e.Int(len(ins))
		for _, x := range ins {
			for _, v := range []int64{x.stream, x.partition, 0, 0, MinTime, x.explicit, 0} {
				e.Varint(v)
			}
		}
		return e.Bytes()
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"repeated input", build(MinTime, in{1, 2, 0}, in{1, 2, 0}), "input 1/2 appears twice"},
		{"partition out of range", build(MinTime, in{1, math.MaxInt32 + 1, 0}), "input 1/2147483648 out of range"},
		{"explicit below the floor", build(5, in{0, 0, 4}), "explicit watermark 4 below the floor 5"},
		{"count beyond the input", []byte{0, 0, 2, 0, 0, 0, 0, 0, 0, 0}, "count 2 exceeds"},
		{"truncated", build(0, in{0, 0, 0})[:15], "bad varint"},
	}
	good := build(0, in{0, 0, 0}, in{0, 1, 7})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := restoreWatermarks(t, &manualClock{}, good)
			err := w.Decode(codec.NewDecoder(tt.b))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("Decode error %v, want a corrupt-state error containing %q", err, tt.want)
			}
			if !bytes.Equal(encodeWatermarks(w), good) {
				t.Fatal("a failed Decode changed the tracker")
			}
		})
	}
}

// FuzzDecodeWatermarks feeds arbitrary bytes to Decode. It must never
// panic; when it succeeds the tracker must re-encode to exactly the bytes it
// read, find every restored input by id, and keep its invariants as it goes
// on: the task watermark never goes back and never falls below a RaiseAll.
func FuzzDecodeWatermarks(f *testing.F) {
	seeds := func(build func(w *Watermarks, c *manualClock)) {
		c := &manualClock{now: 100}
		w := NewWatermarks(c)
		build(w, c)
		f.Add(encodeWatermarks(w))
	}
	seeds(func(*Watermarks, *manualClock) {})
	seeds(func(w *Watermarks, c *manualClock) {
		w.Observe(w.Input(InputID{}, WatermarkConfig{MaxOutOfOrder: 3, IdleAfter: 10}), 50)
		w.Observe(w.Input(InputID{Stream: 1, Partition: 4}, WatermarkConfig{}), 20)
		w.RaiseStream(1, 30)
		c.now += 11
		w.Current()
	})
	seeds(func(w *Watermarks, c *manualClock) {
		w.Input(InputID{Stream: -2, Partition: math.MinInt32}, WatermarkConfig{MaxOutOfOrder: math.MaxInt64, IdleAfter: math.MaxInt64})
		w.RaiseAll(MaxTime - 1)
		w.Finish()
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		clock := &manualClock{now: 1000}
		w := NewWatermarks(clock)
		d := codec.NewDecoder(data)
		if err := w.Decode(d); err != nil {
			if len(w.Inputs()) != 0 || len(w.index) != 0 || w.current != MinTime || w.floor != MinTime {
				t.Fatalf("a failed Decode (%v) changed the tracker", err)
			}
			return
		}
		if d.Finish() == nil {
			if got := encodeWatermarks(w); !bytes.Equal(got, data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", data, got)
			}
		}
		if len(w.index) != len(w.inputs) {
			t.Fatalf("%d inputs, %d in the index", len(w.inputs), len(w.index))
		}
		for _, in := range w.Inputs() {
			if w.Input(in.ID, WatermarkConfig{}) != in {
				t.Fatalf("Input(%v) is not the restored input", in.ID)
			}
		}
		prev := w.Current()
		floor := w.floor
		check := func(what string) {
			cur := w.Current()
			if cur < prev || cur < floor {
				t.Fatalf("%s: watermark %d after %d (floor %d)", what, cur, prev, floor)
			}
			prev = cur
		}
		for i, in := range w.Inputs() {
			w.Observe(in, in.MaxSeen()+int64(i))
			check("observe")
		}
		fresh := w.Input(InputID{Stream: 1 << 20}, WatermarkConfig{MaxOutOfOrder: 1})
		if fresh.Watermark() < floor {
			t.Fatalf("an input first seen after the restore is at %d, below the floor %d", fresh.Watermark(), floor)
		}
		clock.now = AddSat(clock.now, 1<<40)
		check("tick")
		w.RaiseAll(AddSat(prev, 1))
		floor = w.floor
		check("raise-all")
	})
}

// rowFields is a field map with every kind of value a row holds.
func rowFields() map[string]any {
	return map[string]any{
		"ip":     "10.0.0.1",
		"user":   "alice",
		"empty":  "",
		"long":   strings.Repeat("x", 64),
		"fill":   strings.Repeat("f", 27), // with ip and user: exactly rowBytes
		"amount": 5.5,
		"neg0":   math.Copysign(0, -1),
		"count":  int64(-3),
		"ok":     true,
		"no":     false,
		"nil":    nil,
		"tags":   []any{"a", 1.0, nil, []any{true}},
		"geo":    map[string]any{"lat": 1.5, "city": "Ghent", "z": map[string]any{}},
	}
}

// checkSameRow checks that got is laid out as want: the same names, the
// same number of values in the same place (inline or not), the same values
// with strings at the same offsets of the row's own bytes, so that the
// decoded row is equal in behaviour and as compact as NewRow's.
func checkSameRow(t *testing.T, want, got *Row) {
	t.Helper()
	if len(got.names) != len(want.names) || len(got.names) > 0 && &got.names[0] != &want.names[0] {
		t.Fatalf("names not shared")
	}
	if len(got.vals) != len(want.vals) {
		t.Fatalf("%d values, want %d", len(got.vals), len(want.vals))
	}
	inlineWant := len(want.vals) > 0 && &want.vals[0] == &want.inline[0]
	inlineGot := len(got.vals) > 0 && &got.vals[0] == &got.inline[0]
	if inlineWant != inlineGot {
		t.Fatalf("values inline %v, want %v", inlineGot, inlineWant)
	}
	if got.bytes != want.bytes {
		t.Fatalf("inline bytes %q, want %q", got.bytes[:], want.bytes[:])
	}
	offset := func(r *Row, s string) int {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		base := uintptr(unsafe.Pointer(&r.bytes[0]))
		if s == "" || p < base || p >= base+rowBytes {
			return -1
		}
		return int(p - base)
	}
	for i := range want.vals {
		w, g := want.vals[i], got.vals[i]
		if !reflect.DeepEqual(w, g) {
			t.Fatalf("value %d (%s) = %#v, want %#v", i, want.names[i], g, w)
		}
		if ws, ok := w.(string); ok {
			if ow, og := offset(want, ws), offset(got, g.(string)); ow != og {
				t.Fatalf("value %d (%s) at inline offset %d, want %d", i, want.names[i], og, ow)
			}
		}
	}
	for _, name := range append(append([]string{}, want.names...), "not-a-field") {
		wv, wok := want.Get(name)
		gv, gok := got.Get(name)
		if wok != gok || !reflect.DeepEqual(wv, gv) {
			t.Fatalf("Get(%q) = %#v, %v; want %#v, %v", name, gv, gok, wv, wok)
		}
	}
}

// TestRowRoundTrip encodes narrow and wide rows with absent fields, JSON
// nulls, short, long, empty and exactly fitting strings, numbers (-0
// included), booleans and nested values, decodes them, and checks that each
// decoded row is laid out as NewRow lays it out and answers Get the same;
// and that decoded strings do not point into the checkpoint's bytes.
func TestRowRoundTrip(t *testing.T) {
	fields := rowFields()
	for _, names := range [][]string{
		{},
		{"ip"},
		{"ip", "missing", "nil"},
		{"long", "ip", "amount"},
		{"ip", "user", "fill", "empty", "long", "amount", "neg0", "count", "ok", "no", "nil", "tags", "geo", "missing"},
		{"fill", "ip", "fill", "user"}, // the second fill no longer fits, user still does
	} {
		t.Run(strings.Join(names, ","), func(t *testing.T) {
			want := NewRow(names, fields)
			var e codec.Encoder
			if err := AppendRow(&e, names, fields); err != nil {
				t.Fatal(err)
			}
			buf := e.Bytes()
			for at := -1; at < len(names); at++ {
				skip := codec.NewDecoder(buf)
				s, isStr := SkipRow(skip, names, at)
				if err := skip.Finish(); err != nil {
					t.Fatalf("SkipRow: %v", err)
				}
				var want any
				if at >= 0 {
					want, _ = NewRow(names, fields).Get(names[at])
				}
				if ws, ok := want.(string); ok != isStr || ok && ws != string(s) {
					t.Errorf("SkipRow at %d: %q, %v; want %#v", at, s, isStr, want)
				}
			}
			d := codec.NewDecoder(buf)
			got := DecodeRow(d, names)
			if err := d.Finish(); err != nil {
				t.Fatal(err)
			}
			checkSameRow(t, want, got)
			clear(buf) // the row must not depend on the checkpoint's bytes
			checkSameRow(t, NewRow(names, fields), got)
		})
	}
}

// TestRowRandom checks DecodeRow against NewRow on random rows: random
// field sets, string lengths around the inline capacity, and absent fields.
func TestRowRandom(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -stream.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(7, seed))
	all := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for range 2000 {
		names := make([]string, rng.IntN(len(all)+1))
		for i := range names {
			names[i] = all[rng.IntN(len(all))] // repeated names too
		}
		fields := map[string]any{}
		for _, n := range all {
			switch rng.IntN(5) {
			case 0: // absent
			case 1:
				fields[n] = rng.Float64()
			case 2:
				fields[n] = nil
			default:
				fields[n] = strings.Repeat(n, rng.IntN(rowBytes+5))
			}
		}
		want := NewRow(names, fields)
		var e codec.Encoder
		if err := AppendRow(&e, names, fields); err != nil {
			t.Fatal(err)
		}
		d := codec.NewDecoder(e.Bytes())
		got := DecodeRow(d, names)
		if err := d.Finish(); err != nil {
			t.Fatal(err)
		}
		checkSameRow(t, want, got)
	}
}

// TestRowErrors checks the errors of AppendRow, DecodeRow and SkipRow.
func TestRowErrors(t *testing.T) {
	var e codec.Encoder
	err := AppendRow(&e, []string{"a", "bad"}, map[string]any{"a": 1.0, "bad": struct{}{}})
	if err == nil || !strings.Contains(err.Error(), `field "bad"`) {
		t.Fatalf("AppendRow error %v", err)
	}
	e = codec.Encoder{}
	if err := AppendRow(&e, []string{"a", "b"}, map[string]any{"a": "x"}); err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x02, 0x01, 0x04, 0x01, 'x', 0x00}; !bytes.Equal(e.Bytes(), want) {
		t.Fatalf("encoding %x, want %x", e.Bytes(), want) // pins the layout
	}
	for _, tt := range []struct {
		names []string
		b     []byte
		want  string
	}{
		{[]string{"a", "b", "c"}, e.Bytes(), "row has 2 values for 3 fields"},
		{[]string{"a"}, e.Bytes(), "row has 2 values for 1 fields"},
		{[]string{"a", "b"}, e.Bytes()[:4], "length 1 exceeds the 0 bytes left"},
		{[]string{"a", "b"}, []byte{0x02, 0x02, 0x00}, "bad bool"},
	} {
		d := codec.NewDecoder(tt.b)
		if r := DecodeRow(d, tt.names); r != nil || d.Err() == nil || !strings.Contains(d.Err().Error(), tt.want) {
			t.Errorf("DecodeRow(%v, %x) = %v, error %v; want nil and %q", tt.names, tt.b, r, d.Err(), tt.want)
		}
		d = codec.NewDecoder(tt.b)
		if SkipRow(d, tt.names, 0); d.Err() == nil || !strings.Contains(d.Err().Error(), tt.want) {
			t.Errorf("SkipRow(%v, %x): error %v, want %q", tt.names, tt.b, d.Err(), tt.want)
		}
	}
}

// FuzzDecodeRow feeds arbitrary bytes to DecodeRow for a narrow and a wide
// set of names: it must never panic, a row it accepts must re-encode to the
// bytes it read, and SkipRow must accept the same rows and read as far.
func FuzzDecodeRow(f *testing.F) {
	for _, names := range [][]string{{"ip", "user"}, {"ip", "user", "fill", "long", "tags", "geo"}} {
		var e codec.Encoder
		if err := AppendRow(&e, names, rowFields()); err != nil {
			f.Fatal(err)
		}
		f.Add(e.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, names := range [][]string{{"ip", "user"}, {"ip", "user", "fill", "long", "tags", "geo"}} {
			d := codec.NewDecoder(data)
			r := DecodeRow(d, names)
			skip := codec.NewDecoder(data)
			SkipRow(skip, names, 0)
			if (skip.Err() == nil) != (d.Err() == nil) || d.Err() == nil && skip.Len() != d.Len() {
				t.Fatalf("SkipRow: err %v, %d bytes left; DecodeRow: err %v, %d left", skip.Err(), skip.Len(), d.Err(), d.Len())
			}
			if r == nil {
				if d.Err() == nil {
					t.Fatal("nil row without an error")
				}
				continue
			}
			for _, n := range names {
				r.Get(n)
			}
			if d.Finish() != nil {
				continue
			}
			fields := map[string]any{}
			for _, n := range names {
				if v, ok := r.Get(n); ok {
					fields[n] = v
				}
			}
			var e codec.Encoder
			if err := AppendRow(&e, names, fields); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(e.Bytes(), data[:len(data)-d.Len()]) {
				t.Fatalf("re-encoding differs:\n%x\n%x", data, e.Bytes())
			}
		}
	})
}
