package window

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
)

var randomSeed = flag.Uint64("window.seed", 0, "seed of TestRandomStream (0: from the clock)")

var allAggs = []Aggregate{
	{"n", Count}, {"s", Sum}, {"lo", Min}, {"hi", Max}, {"m", Avg}, {"d", CountDistinct},
}

// TestRandomStream feeds long random streams with a moving watermark to the
// Operator and to refModel, a brute-force re-implementation, and compares
// every firing, every late flag and the number of live windows after every
// call. For tumbling and sliding windows it also checks the final value of
// every window against the aggregate of the elements it accepted, computed
// from the event log alone.
func TestRandomStream(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 60 {
		spec := randomSpec(rng)
		t.Run(fmt.Sprintf("%d-%s", i, spec.Kind), func(t *testing.T) {
			t.Logf("%+v", spec)
			runRandomStream(t, rng, spec)
		})
	}
}

func randomSpec(rng *rand.Rand) Spec {
	s := Spec{Kind: Kind(1 + rng.IntN(3))}
	if rng.IntN(3) > 0 {
		s.AllowedLateness = rng.Int64N(40)
	}
	switch s.Kind {
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

// event is one Add of the random stream, with the watermark the operator
// had once Add had advanced it.
type event struct {
	key      string
	t        int64
	args     []any
	wm       int64
	accepted bool
}

func runRandomStream(t *testing.T, rng *rand.Rand, spec Spec) {
	op, err := New(spec, allAggs)
	if err != nil {
		t.Fatal(err)
	}
	ref := &refModel{spec: spec, wm: math.MinInt64}
	keys := make([]string, 1+rng.IntN(12))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	bound := rng.Int64N(30)              // out-of-orderness of the watermark
	spread := bound + 1 + rng.Int64N(40) // some events come later than that
	maxT := rng.Int64N(2000) - 1000
	wm := int64(math.MinInt64)
	var got []Result
	emit := func(r Result) { got = append(got, r) }
	var log []event
	var history []Result // every firing, in order
	check := func(step string) {
		t.Helper()
		if (len(ref.out) > 0 || len(got) > 0) && !reflect.DeepEqual(ref.out, got) {
			t.Fatalf("%s: firings differ (-ref +operator):\n%s", step, gocmp.Diff(ref.out, got))
		}
		if op.Len() != len(ref.wins) {
			t.Fatalf("%s: Len() = %d, ref has %d windows", step, op.Len(), len(ref.wins))
		}
		if limit := liveLimit(spec, len(keys), maxT, ref.wm); op.Len() > limit {
			t.Fatalf("%s: Len() = %d, more than the %d windows that can be live", step, op.Len(), limit)
		}
		history = append(history, got...)
		got, ref.out = got[:0], ref.out[:0]
	}
	for i := range 3000 {
		maxT += rng.Int64N(4)
		if rng.IntN(4) == 0 {
			wm = max(wm, maxT-bound-1)
		}
		if rng.IntN(10) == 0 {
			step := fmt.Sprintf("event %d: advance wm=%d", i, wm)
			op.Advance(wm, emit)
			ref.advance(wm)
			check(step)
		}
		e := event{key: keys[rng.IntN(len(keys))], t: maxT - rng.Int64N(spread), args: randomArgs(rng)}
		addWM := wm
		if rng.IntN(20) == 0 {
			addWM = math.MinInt64 // a stale watermark changes nothing
		}
		step := fmt.Sprintf("event %d: add key=%s t=%d wm=%d", i, e.key, e.t, addWM)
		if e.key[len(e.key)-1]%2 == 0 { // half the keys through a Key handle, kept as keys come and go
			e.accepted = addKeyed(op, e.key, e.t, e.args, addWM, emit)
		} else {
			e.accepted = op.Add(e.key, e.t, e.args, addWM, emit)
		}
		if want := ref.add(e.key, e.t, e.args, addWM); e.accepted != want {
			t.Fatalf("%s: accepted = %v, ref says %v", step, e.accepted, want)
		}
		e.wm = ref.wm
		check(step)
		log = append(log, e)
	}
	op.Advance(math.MaxInt64, emit)
	ref.advance(math.MaxInt64)
	check("advance wm=max")
	if op.Len() != 0 || op.keys.len() != 0 {
		t.Fatalf("after the maximum watermark: Len() = %d, %d keys", op.Len(), op.keys.len())
	}
	updates, late := 0, 0
	for _, r := range history {
		if r.Update {
			updates++
		}
	}
	for _, e := range log {
		if !e.accepted {
			late++
		}
	}
	t.Logf("%d events (%d late), %d firings (%d updates)", len(log), late, len(history), updates)
	if spec.Kind != Session {
		checkFinalValues(t, spec, log, history)
	}
}

// checkFinalValues checks, from the definition alone, that an element is
// accepted iff one of its windows had a cleanup time after the watermark,
// and that the last firing of every window aggregates exactly the elements
// that it accepted.
func checkFinalValues(t *testing.T, spec Spec, log []event, results []Result) {
	type wkey struct {
		key        string
		start, end int64
	}
	want := make(map[wkey][][]any)
	for i, e := range log {
		accepted := false
		for _, w := range refAssign(spec, e.t) {
			if satAdd(w[1]-1, spec.AllowedLateness) > e.wm {
				k := wkey{e.key, w[0], w[1]}
				want[k] = append(want[k], e.args)
				accepted = true
			}
		}
		if accepted != e.accepted {
			t.Fatalf("event %d (key=%s t=%d wm=%d): accepted = %v, its windows say %v",
				i, e.key, e.t, e.wm, e.accepted, accepted)
		}
	}
	last := make(map[wkey]Result)
	for _, r := range results {
		last[wkey{r.Key, r.Start, r.End}] = r
	}
	if len(last) != len(want) {
		t.Fatalf("%d windows fired, %d windows accepted elements", len(last), len(want))
	}
	for k, elems := range want {
		r, ok := last[k]
		if !ok {
			t.Fatalf("window %+v accepted %d elements but never fired", k, len(elems))
		}
		if want := refValues(elems); !reflect.DeepEqual(want, r.Values) {
			t.Fatalf("window %+v: final values differ (-want +got):\n%s", k, gocmp.Diff(want, r.Values))
		}
	}
}

// liveLimit bounds the windows that can be live at watermark wm when no
// element is later than maxT: each has cleanup > wm and starts at or before
// maxT.
func liveLimit(spec Spec, keys int, maxT, wm int64) int {
	if wm == math.MinInt64 {
		return math.MaxInt
	}
	span := maxT - wm + spec.AllowedLateness
	var perKey int64
	switch spec.Kind {
	case Tumbling:
		perKey = (span+spec.Size)/spec.Size + 1
	case Sliding:
		perKey = (span+spec.Size)/spec.Slide + 1
	case Session:
		// Sessions of a key are disjoint, at least gap long, and lie in
		// (wm-L-gap, maxT+gap).
		perKey = (span+2*spec.Gap)/spec.Gap + 1
	}
	return keys * int(max(perKey, 0))
}

func randomArgs(rng *rand.Rand) []any {
	args := make([]any, len(allAggs))
	for i := range args {
		switch rng.IntN(6) {
		case 0:
			args[i] = nil
		case 1:
			args[i] = fmt.Sprintf("s%d", rng.IntN(4))
		case 2:
			args[i] = rng.IntN(2) == 0
		case 3:
			args[i] = float64(rng.IntN(20) - 10)
		default:
			args[i] = int64(rng.IntN(20) - 10)
		}
	}
	if rng.IntN(10) == 0 {
		args = args[:rng.IntN(len(args))] // missing arguments count as nil
	}
	return args
}

// refAssign returns the [start, end) windows of an element at t for a
// tumbling or sliding spec by enumerating the grid offset + k*slide, or its
// own session window.
func refAssign(spec Spec, t int64) [][2]int64 {
	switch spec.Kind {
	case Session:
		return [][2]int64{{t, t + spec.Gap}}
	case Tumbling:
		spec.Slide = spec.Size
	}
	// Windows contain t iff offset + k*slide <= t < offset + k*slide + size.
	var ws [][2]int64
	for k := floorDiv(t-spec.Offset-spec.Size, spec.Slide); ; k++ {
		start := spec.Offset + k*spec.Slide
		if start > t {
			return ws
		}
		if t < start+spec.Size {
			ws = append(ws, [2]int64{start, start + spec.Size})
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// refModel is a brute-force window operator: a flat list of windows that
// keep their elements, scanned on every call.
type refModel struct {
	spec Spec
	wm   int64
	wins []*refWindow
	out  []Result
}

type refWindow struct {
	key        string
	start, end int64
	elems      [][]any
	fired      bool
}

func (m *refModel) cleanup(w *refWindow) int64 {
	return satAdd(w.end-1, m.spec.AllowedLateness)
}

// advance fires the windows whose end-1 the watermark passes now, and drops
// the windows whose cleanup time it reaches.
func (m *refModel) advance(wm int64) {
	if wm <= m.wm {
		return
	}
	var due []*refWindow
	for _, w := range m.wins {
		if w.end-1 > m.wm && w.end-1 <= wm {
			due = append(due, w)
		}
	}
	slices.SortFunc(due, func(a, b *refWindow) int {
		return cmp.Or(cmp.Compare(a.end, b.end), cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start))
	})
	for _, w := range due {
		m.fire(w)
	}
	m.wm = wm
	m.wins = slices.DeleteFunc(m.wins, func(w *refWindow) bool { return m.cleanup(w) <= wm })
}

func (m *refModel) add(key string, t int64, args []any, wm int64) bool {
	m.advance(wm)
	if m.spec.Kind == Session {
		return m.addSession(key, t, args)
	}
	accepted := false
	for _, b := range refAssign(m.spec, t) {
		w := &refWindow{key: key, start: b[0], end: b[1]}
		if m.cleanup(w) <= m.wm {
			continue
		}
		accepted = true
		if i := slices.IndexFunc(m.wins, func(x *refWindow) bool {
			return x.key == key && x.start == w.start && x.end == w.end
		}); i >= 0 {
			w = m.wins[i]
		} else {
			m.wins = append(m.wins, w)
		}
		w.elems = append(w.elems, args)
		if w.end-1 <= m.wm {
			m.fire(w)
		}
	}
	return accepted
}

func (m *refModel) addSession(key string, t int64, args []any) bool {
	w := &refWindow{key: key, start: t, end: t + m.spec.Gap}
	var rest []*refWindow
	merged := false
	for _, x := range m.wins {
		if x.key == key && x.start <= w.end && x.end >= w.start {
			w.start, w.end = min(w.start, x.start), max(w.end, x.end)
			w.elems = append(w.elems, x.elems...)
			w.fired = w.fired || x.fired
			merged = true
			continue
		}
		rest = append(rest, x)
	}
	if !merged && m.cleanup(w) <= m.wm {
		return false
	}
	m.wins = append(rest, w)
	w.elems = append(w.elems, args)
	if w.end-1 <= m.wm {
		m.fire(w)
	}
	return true
}

func (m *refModel) fire(w *refWindow) {
	m.out = append(m.out, Result{Key: w.key, Start: w.start, End: w.end, Values: refValues(w.elems), Update: w.fired})
	w.fired = true
}

// refValues computes allAggs over the argument lists of a window's elements.
func refValues(elems [][]any) []any {
	arg := func(e []any, i int) any {
		if i < len(e) {
			return e[i]
		}
		return nil
	}
	nums := make([][]float64, len(allAggs))
	distinct := make(map[string]bool)
	for _, e := range elems {
		for i := range allAggs {
			switch v := arg(e, i).(type) {
			case int64:
				nums[i] = append(nums[i], float64(v))
			case float64:
				nums[i] = append(nums[i], v)
			}
		}
		switch v := arg(e, 5).(type) {
		case int64:
			distinct[fmt.Sprint("number ", float64(v))] = true
		case float64:
			distinct[fmt.Sprint("number ", v)] = true
		case string:
			distinct["string "+v] = true
		case bool:
			distinct[fmt.Sprint("bool ", v)] = true
		}
	}
	sum := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s
	}
	orNil := func(xs []float64, f func([]float64) float64) any {
		if len(xs) == 0 {
			return nil
		}
		return f(xs)
	}
	return []any{
		int64(len(elems)),
		sum(nums[1]),
		orNil(nums[2], slices.Min[[]float64]),
		orNil(nums[3], slices.Max[[]float64]),
		orNil(nums[4], func(xs []float64) float64 { return sum(xs) / float64(len(xs)) }),
		int64(len(distinct)),
	}
}
