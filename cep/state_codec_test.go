package cep

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vigil-cep/vigil/internal/codec"
)

// The tests of State.Encode and NFA.DecodeState. Test events carry a
// map[string]any with a "name" and a number "v" (the patterns below), or a
// bare string (the random patterns of random_test.go); both go through
// codec's Value encoding.

func encodeValue(e *codec.Encoder, v any) error { return e.Value(v) }

func decodeValue(d *codec.Decoder) any { return d.Value() }

func mustEncode(t testing.TB, s *State) []byte {
	t.Helper()
	e := codec.NewEncoder(nil)
	if err := s.Encode(e, encodeValue); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return e.Bytes()
}

// decodeAll decodes b as exactly one State. It fails the test if DecodeState
// breaks its contract: a nil State exactly when d reports an error.
func decodeAll(t testing.TB, n *NFA, b []byte) (*State, error) {
	t.Helper()
	d := codec.NewDecoder(b)
	s := n.DecodeState(d, decodeValue)
	if (s == nil) != (d.Err() != nil) {
		t.Fatalf("DecodeState returned a State: %t, with error %v", s != nil, d.Err())
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return s, nil
}

// ckName is the name of a test event. It accepts any Value, since the fuzz
// test feeds conditions events with arbitrary decoded values.
func ckName(ev *Event) string {
	switch v := ev.Value.(type) {
	case string:
		return v
	case map[string]any:
		s, _ := v["name"].(string)
		return s
	}
	return ""
}

func ckNum(ev *Event) float64 {
	m, _ := ev.Value.(map[string]any)
	f, _ := m["v"].(float64)
	return f
}

// ckIs accepts events whose (one-letter) name is one of names.
func ckIs(names string) Condition {
	return func(ev *Event, _ Partial) bool {
		n := ckName(ev)
		return len(n) == 1 && strings.Contains(names, n)
	}
}

// ckSumBelow accepts an event named one of names when the numbers of the
// events the partial match took so far, plus its own, add up to less than
// limit: a condition that reads the restored events through Partial.
func ckSumBelow(names string, steps int, limit float64) Condition {
	is := ckIs(names)
	return func(ev *Event, p Partial) bool {
		if !is(ev, p) {
			return false
		}
		sum := ckNum(ev)
		for i := range steps {
			for _, e := range p.Events(i) {
				sum += ckNum(e)
			}
		}
		return sum < limit
	}
}

type ckCase struct {
	name string
	p    Pattern
	opts []Option
}

// ckCases are patterns that together use every feature that leaves state
// behind: each contiguity (strict, relaxed, non-deterministic relaxed),
// times, one_or_more, optional, greedy with until, NotFollowedBy in the
// middle and at the end (a pending partial match), NotNext in the middle and
// at the end, within, every skip strategy, a condition that reads the partial
// match, and caps small enough to drop partial matches.
func ckCases() []ckCase {
	a, b, c, x := ckIs("a"), ckIs("b"), ckIs("c"), ckIs("x")
	return []ckCase{
		{"contiguity", Pattern{Within: 8, Steps: []Step{
			{Name: "a", Where: a},
			{Name: "b", Where: ckIs("bc"), Contiguity: Strict},
			{Name: "c", Where: c, Contiguity: Any},
			{Name: "d", Where: ckIs("ab")},
		}}, nil},
		{"times", Pattern{Within: 10, Skip: Skip{Kind: SkipToNext}, Steps: []Step{
			{Name: "a", Where: ckIs("ab"), Min: 2, Max: 3, Inner: Strict},
			{Name: "b", Where: b, Min: 2, Max: 2, Contiguity: Any, Inner: Any},
		}}, nil},
		{"greedy_until", Pattern{Within: 12, Skip: Skip{Kind: SkipPastLastEvent}, Steps: []Step{
			{Name: "a", Where: a},
			{Name: "b", Where: ckIs("ab"), Min: 1, Max: -1, Greedy: true, Until: x},
			{Name: "c", Where: ckIs("bc")},
		}}, nil},
		{"optional", Pattern{Skip: Skip{Kind: SkipToFirst, Step: "b"}, Steps: []Step{
			{Name: "a", Where: a, Min: 1, Max: -1, Inner: Any},
			{Name: "b", Where: b, Min: 0, Max: 2, Contiguity: Any},
			{Name: "c", Where: c},
		}}, []Option{MaxPartials(40)}},
		{"not_followed_by", Pattern{Within: 10, Skip: Skip{Kind: SkipToLast, Step: "a"}, Steps: []Step{
			{Name: "a", Where: a, Min: 1, Max: -1},
			{Name: "x", Where: x, Not: NotFollowedBy},
			{Name: "b", Where: b},
		}}, nil},
		{"trailing_not_followed_by", Pattern{Within: 5, Steps: []Step{
			{Name: "a", Where: a},
			{Name: "b", Where: b, Min: 1, Max: -1, Contiguity: Any},
			{Name: "x", Where: x, Not: NotFollowedBy},
		}}, []Option{MaxPartials(60)}},
		{"trailing_not_followed_by_skip", Pattern{Within: 4, Skip: Skip{Kind: SkipToNext}, Steps: []Step{
			{Name: "a", Where: ckIs("ab")},
			{Name: "x", Where: x, Not: NotFollowedBy},
		}}, nil},
		{"not_next", Pattern{Within: 6, Skip: Skip{Kind: SkipPastLastEvent}, Steps: []Step{
			{Name: "a", Where: a},
			{Name: "n", Where: b, Not: NotNext},
			{Name: "c", Where: c, Contiguity: Any},
		}}, nil},
		{"trailing_not_next", Pattern{Steps: []Step{
			{Name: "a", Where: a, Min: 1, Max: -1, Inner: Any},
			{Name: "n", Where: x, Not: NotNext},
		}}, []Option{MaxPartials(30)}},
		{"iterative", Pattern{Within: 6, Steps: []Step{
			{Name: "a", Where: ckSumBelow("a", 2, 6), Min: 1, Max: -1, Inner: Any},
			{Name: "b", Where: ckSumBelow("b", 2, 8), Contiguity: Any},
		}}, []Option{MaxPartials(25)}},
		{"cap_held", Pattern{Skip: Skip{Kind: SkipToNext}, Steps: []Step{
			{Name: "a", Where: a, Min: 1, Max: -1, Inner: Any},
			{Name: "b", Where: b, Min: 2, Max: 2, Contiguity: Any},
		}}, []Option{MaxPartials(8)}},
	}
}

// ckNFAs are ckCases compiled, shared by the fuzz test and the corpus.
var ckNFAs = sync.OnceValue(func() []*NFA {
	var out []*NFA
	for _, c := range ckCases() {
		n, err := Compile(c.p, c.opts...)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", c.name, err))
		}
		out = append(out, n)
	}
	return out
})

// ckEvents is a random stream of map-valued events; times increase by 0 to
// 2, so that ties in time are ordered by Seq.
func ckEvents(rng *rand.Rand) []*Event {
	events := make([]*Event, 8+rng.IntN(33))
	var now int64
	for i := range events {
		now += int64(rng.IntN(3))
		v := map[string]any{"name": string("aabbcx"[rng.IntN(6)]), "v": float64(rng.IntN(4))}
		if rng.IntN(5) == 0 {
			v["extra"] = []any{float64(i), "s", nil, true}
		}
		events[i] = &Event{Time: now, Seq: uint64(i + 1), Value: v}
	}
	return events
}

// ckStringEvents is a random stream for the patterns of randomFullPattern.
func ckStringEvents(rng *rand.Rand) []*Event {
	events := make([]*Event, 5+rng.IntN(26))
	var now int64
	for i := range events {
		now += int64(rng.IntN(3))
		events[i] = &Event{Time: now, Seq: uint64(i + 1), Value: string(alphabet[rng.IntN(len(alphabet))])}
	}
	return events
}

// ckOp is one call: Process(ev), or Advance(t) when ev is nil.
type ckOp struct {
	ev *Event
	t  int64
}

func (op ckOp) String() string {
	if op.ev == nil {
		return fmt.Sprintf("advance %d", op.t)
	}
	return fmt.Sprintf("process %d/%d %v", op.ev.Time, op.ev.Seq, op.ev.Value)
}

func (op ckOp) apply(s *State, r *ckRecorder) {
	var match func(Match)
	var timeout func(Timeout)
	if r != nil {
		match, timeout = r.match, r.timeout
	}
	if op.ev == nil {
		s.Advance(op.t, match, timeout)
	} else {
		s.Process(op.ev, match, timeout)
	}
}

// ckOps feeds events with Advance calls (watermarks) between some of them,
// and ends with two: one a little after the last event, one at the end of
// time.
func ckOps(rng *rand.Rand, events []*Event) []ckOp {
	var ops []ckOp
	now := events[0].Time
	for _, ev := range events {
		if rng.IntN(4) == 0 {
			ops = append(ops, ckOp{t: now + rng.Int64N(ev.Time-now+1)})
		}
		ops = append(ops, ckOp{ev: ev})
		now = ev.Time
	}
	return append(ops, ckOp{t: now + rng.Int64N(8)}, ckOp{t: math.MaxInt64})
}

// ckRecorder formats the outputs of one State: times, step structure, and
// each event's Time, Seq and Value, plus a number that identifies its
// pointer among the outputs since the recorder was made. Two States' outputs
// compare equal only if they share events between matches the same way.
type ckRecorder struct {
	ids map[*Event]int
	out []string
}

func newCkRecorder() *ckRecorder { return &ckRecorder{ids: map[*Event]int{}} }

func (r *ckRecorder) match(m Match) {
	r.out = append(r.out, "match "+r.format(m.Start, m.End, m.Events))
}

func (r *ckRecorder) timeout(to Timeout) {
	r.out = append(r.out, "timeout "+r.format(to.Start, to.Deadline, to.Events))
}

func (r *ckRecorder) format(from, to int64, events [][]*Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d..%d", from, to)
	for i, evs := range events {
		fmt.Fprintf(&b, " s%d=", i)
		if evs == nil {
			b.WriteString("nil")
			continue
		}
		b.WriteByte('[')
		for j, ev := range evs {
			id, ok := r.ids[ev]
			if !ok {
				id = len(r.ids)
				r.ids[ev] = id
			}
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "#%d:%d/%d:%v", id, ev.Time, ev.Seq, ev.Value)
		}
		b.WriteByte(']')
	}
	return b.String()
}

func ckStats(s *State) string {
	return fmt.Sprintf("len=%d buffered=%d dropped=%d deadline=%d empty=%t", s.Len(), s.Buffered(), s.Dropped(), s.NextDeadline(), s.Empty())
}

// ckCoverage counts the cut points whose state had each feature, so that the
// differential test fails if it stops exercising one.
type ckCoverage struct {
	cuts, runs, held, heldShared, pending, dropped, sharedEntries, freeSlots int
}

func (c *ckCoverage) note(s *State) {
	c.cuts++
	if len(s.runs) > 0 {
		c.runs++
	}
	if len(s.held) > 0 {
		c.held++
	}
	buffered := map[*Event]bool{}
	for _, sl := range s.buf.events {
		if sl.ev != nil {
			buffered[sl.ev] = true
		}
	}
	if slices.ContainsFunc(s.held, func(h completed) bool {
		return slices.ContainsFunc(h.m.Events, func(evs []*Event) bool {
			return slices.ContainsFunc(evs, func(ev *Event) bool { return buffered[ev] })
		})
	}) {
		c.heldShared++
	}
	if slices.ContainsFunc(s.runs, func(r run) bool { return s.nfa.states[r.state].kind == kindPending }) {
		c.pending++
	}
	if s.dropped > 0 {
		c.dropped++
	}
	if slices.ContainsFunc(s.buf.entries, func(e entry) bool { return e.refs > 1 }) {
		c.sharedEntries++
	}
	if len(s.buf.freeEntries) > 0 {
		c.freeSlots++
	}
}

// ckRun feeds ops[:cut] to a new State A, restores B from A's encoding, and
// requires that B encodes to the same bytes; then it feeds ops[cut:] to both
// and requires, after every call, the same outputs, the same Len, Buffered,
// Dropped and NextDeadline, the same encoding, and consistent reference
// counts in B.
func ckRun(t *testing.T, nfa *NFA, ops []ckOp, cut int, label string, cov *ckCoverage) {
	t.Helper()
	a := nfa.NewState()
	for _, op := range ops[:cut] {
		op.apply(a, nil)
	}
	enc := mustEncode(t, a)
	b, err := decodeAll(t, nfa, enc)
	if err != nil {
		t.Fatalf("%s, cut %d: decoding a valid encoding: %v", label, cut, err)
	}
	if re := mustEncode(t, b); !bytes.Equal(re, enc) {
		t.Fatalf("%s, cut %d: the restored state encodes differently:\n%x\n%x", label, cut, enc, re)
	}
	checkBuffer(t, b)
	cov.note(a)
	if sa, sb := ckStats(a), ckStats(b); sa != sb {
		t.Fatalf("%s, cut %d: original %s, restored %s", label, cut, sa, sb)
	}
	ra, rb := newCkRecorder(), newCkRecorder()
	for i, op := range ops[cut:] {
		ra.out, rb.out = ra.out[:0], rb.out[:0]
		op.apply(a, ra)
		op.apply(b, rb)
		where := fmt.Sprintf("%s, cut %d, call %d after the cut (%s)", label, cut, i, op)
		if diff := cmp.Diff(ra.out, rb.out); diff != "" {
			t.Fatalf("%s: outputs differ (-original +restored):\n%s", where, diff)
		}
		if sa, sb := ckStats(a), ckStats(b); sa != sb {
			t.Fatalf("%s: original %s, restored %s", where, sa, sb)
		}
		checkBuffer(t, b)
		if ea, eb := mustEncode(t, a), mustEncode(t, b); !bytes.Equal(ea, eb) {
			t.Fatalf("%s: encodings differ:\n%x\n%x", where, ea, eb)
		}
	}
}

// TestStateCodecDifferential checkpoints a State at a random point of a
// random stream, restores it, and runs the original and the restored State
// side by side on the rest of the stream: they must agree on everything,
// call by call. It runs the patterns of ckCases over many seeds, then random
// patterns with every feature (randomFullPattern) and random caps.
func TestStateCodecDifferential(t *testing.T) {
	seeds, random := 300, 600
	if testing.Short() {
		seeds, random = 60, 120
	}
	var cov ckCoverage
	for ci, c := range ckCases() {
		nfa := ckNFAs()[ci]
		for seed := range uint64(seeds) {
			rng := rand.New(rand.NewPCG(uint64(ci), seed))
			ops := ckOps(rng, ckEvents(rng))
			ckRun(t, nfa, ops, rng.IntN(len(ops)+1), fmt.Sprintf("pattern %s, seed %d", c.name, seed), &cov)
		}
	}
	rng := rand.New(rand.NewPCG(42, 42))
	for compiled := 0; compiled < random; {
		p := randomFullPattern(rng)
		nfa, err := Compile(p, MaxPartials(1+rng.IntN(30)))
		if err != nil {
			continue
		}
		compiled++
		for k := range 3 {
			ops := ckOps(rng, ckStringEvents(rng))
			ckRun(t, nfa, ops, rng.IntN(len(ops)+1), fmt.Sprintf("random pattern %d %s skip=%v, stream %d", compiled, describe(p), p.Skip, k), &cov)
		}
	}
	t.Logf("coverage at the cut: %+v", cov)
	for what, n := range map[string]int{
		"partial matches": cov.runs, "held matches": cov.held, "held matches sharing buffered events": cov.heldShared,
		"pending partial matches": cov.pending, "dropped partial matches": cov.dropped,
		"shared entries": cov.sharedEntries, "free slots": cov.freeSlots,
	} {
		if n == 0 {
			t.Errorf("no cut point had %s", what)
		}
	}
}

// ckSeed is a valid encoding for ckNFAs()[nfa].
type ckSeed struct {
	nfa int
	enc []byte
}

// ckCorpus returns valid encodings of each ckCase: the empty state, and
// states cut from random streams where partial matches are open and, under a
// skip strategy, matches are held back.
func ckCorpus(tb testing.TB) []ckSeed {
	var out []ckSeed
	for ci, c := range ckCases() {
		nfa := ckNFAs()[ci]
		out = append(out, ckSeed{ci, mustEncode(tb, nfa.NewState())})
		found := 0
		for seed := uint64(0); seed < 500 && found < 3; seed++ {
			rng := rand.New(rand.NewPCG(uint64(ci), seed))
			ops := ckOps(rng, ckEvents(rng))
			s := nfa.NewState()
			for _, op := range ops[:len(ops)-2] { // not the final Advance calls
				op.apply(s, nil)
				if len(s.runs) >= 2 && (len(s.held) > 0 || c.p.Skip.Kind == NoSkip) {
					out = append(out, ckSeed{ci, mustEncode(tb, s)})
					found++
					break
				}
			}
		}
	}
	return out
}

// TestDecodeStateCorrupt decodes every truncation and every single bit flip
// of valid encodings. A truncation must be reported by d.Err (every field is
// read, so a missing byte cannot go unnoticed). A bit flip must be reported
// or give a State that is consistent, re-encodes to the flipped bytes, and
// runs without panicking.
func TestDecodeStateCorrupt(t *testing.T) {
	corpus := ckCorpus(t)
	if testing.Short() {
		corpus = corpus[:len(corpus)/3]
	}
	accepted, flips := 0, 0
	for _, seed := range corpus {
		nfa := ckNFAs()[seed.nfa]
		for n := range len(seed.enc) {
			d := codec.NewDecoder(seed.enc[:n])
			if s := nfa.DecodeState(d, decodeValue); s != nil || d.Err() == nil {
				t.Fatalf("pattern %d: truncated to %d of %d bytes, DecodeState reports no error", seed.nfa, n, len(seed.enc))
			}
		}
		for i := range len(seed.enc) * 8 {
			b := bytes.Clone(seed.enc)
			b[i/8] ^= 1 << (i % 8)
			flips++
			if ckExercise(t, seed.nfa, b) {
				accepted++
			}
		}
	}
	t.Logf("%d encodings, %d bit flips, %d decoded to valid states (changed times, seqs or values)", len(corpus), flips, accepted)
}

// ckExercise decodes b for ckNFAs()[nfa] and, if it is accepted, checks the
// State and runs it. It reports whether b was accepted.
func ckExercise(t *testing.T, nfa int, b []byte) bool {
	n := ckNFAs()[nfa]
	s, err := decodeAll(t, n, b)
	if err != nil {
		return false
	}
	if re := mustEncode(t, s); !bytes.Equal(re, b) {
		t.Fatalf("pattern %d: accepted input does not re-encode to itself:\n%x\n%x", nfa, b, re)
	}
	checkBuffer(t, s)
	for i, name := range []string{"a", "b", "x", "c", "b"} {
		s.Process(&Event{Time: int64(i), Seq: uint64(1000 + i), Value: map[string]any{"name": name, "v": 1.0}}, func(Match) {}, func(Timeout) {})
		checkBuffer(t, s)
	}
	s.Advance(math.MaxInt64, func(Match) {}, func(Timeout) {})
	checkBuffer(t, s)
	return true
}

// FuzzDecodeState decodes arbitrary bytes for one of ckNFAs, chosen by the
// first argument. DecodeState must not panic, and what it accepts must be a
// consistent State that encodes back to the input and runs.
func FuzzDecodeState(f *testing.F) {
	for _, seed := range ckCorpus(f) {
		f.Add(uint8(seed.nfa), seed.enc)
	}
	f.Fuzz(func(t *testing.T, nfa uint8, b []byte) {
		ckExercise(t, int(nfa)%len(ckNFAs()), b)
	})
}

// ckRaw is an encoded State spelled out field by field, to write the layout
// documented in state_codec.go by hand, and corrupt versions of it.
type ckRaw struct {
	version uint64
	dropped uint64
	events  []Event
	slots   []int
	entries [][4]int // slot, step, pred+1, refs
	runs    []ckRawRun
	held    []ckRawHeld
	trailer []byte
}

type ckRawRun struct {
	state, last int
	start       int64
	seq         uint64
}

type ckRawHeld struct {
	start       int64
	seq         uint64
	mStart, end int64
	events      [][]int // by step
}

func (r *ckRaw) bytes(n *NFA) []byte {
	e := codec.NewEncoder(nil)
	e.Uvarint(r.version)
	e.Int(n.steps)
	e.Int(len(n.states))
	e.Varint(n.within)
	e.Int(int(n.skip))
	e.Int(n.skipStep + 1)
	e.Uvarint(r.dropped)
	e.Int(len(r.events))
	for _, ev := range r.events {
		e.Varint(ev.Time)
		e.Uvarint(ev.Seq)
		if err := e.Value(ev.Value); err != nil {
			panic(err)
		}
	}
	e.Int(len(r.slots))
	for _, x := range r.slots {
		e.Int(x)
	}
	e.Int(len(r.entries))
	for _, en := range r.entries {
		for _, x := range en {
			e.Int(x)
		}
	}
	e.Int(len(r.runs))
	for _, x := range r.runs {
		e.Int(x.state)
		e.Int(x.last)
		e.Varint(x.start)
		e.Uvarint(x.seq)
	}
	e.Int(len(r.held))
	for _, h := range r.held {
		e.Varint(h.start)
		e.Uvarint(h.seq)
		e.Varint(h.mStart)
		e.Varint(h.end)
		for _, evs := range h.events {
			e.Int(len(evs))
			for _, x := range evs {
				e.Int(x)
			}
		}
	}
	return append(e.Bytes(), r.trailer...)
}

// ckRawPattern is "a, then b (followedByAny)" within 10.
func ckRawPattern(skip SkipKind) Pattern {
	return Pattern{Within: 10, Skip: Skip{Kind: skip}, Steps: []Step{
		{Name: "a", Where: ckIs("a")},
		{Name: "b", Where: ckIs("b"), Contiguity: Any},
	}}
}

func ckEv(t int64, seq uint64, name string) Event {
	return Event{Time: t, Seq: seq, Value: map[string]any{"name": name}}
}

// TestStateEncodingLayout checks Encode against the layout written by hand:
// one partial match that took "a" then "b", and one that took "a" and
// skipped "b", sharing the entry of "a". Entries come in the order the walk
// of the partial matches meets them, predecessors first. It pins the format:
// a change to it must change stateVersion.
func TestStateEncodingLayout(t *testing.T) {
	nfa := mustCompile(t, Pattern{Steps: []Step{
		{Name: "a", Where: ckIs("a")},
		{Name: "b", Where: ckIs("b"), Min: 1, Max: -1, Contiguity: Any, Inner: Any},
		{Name: "c", Where: ckIs("c")},
	}})
	s := nfa.NewState()
	a1, b2 := ckEv(1, 1, "a"), ckEv(2, 2, "b")
	s.Process(&a1, nil, nil)
	waitB := s.runs[0].state
	s.Process(&b2, nil, nil)
	// The take of b2 comes first, then the partial match that skipped it.
	if len(s.runs) != 2 || s.runs[1].state != waitB {
		t.Fatalf("partial matches %+v, want two, the second waiting in state %d", s.runs, waitB)
	}
	raw := ckRaw{
		version: 1,
		events:  []Event{a1, b2},
		slots:   []int{0, 1},
		entries: [][4]int{{0, 0, 0, 2}, {1, 1, 1, 1}},
		runs:    []ckRawRun{{int(s.runs[0].state), 1, 1, 1}, {int(waitB), 0, 1, 1}},
	}
	if got, want := mustEncode(t, s), raw.bytes(nfa); !bytes.Equal(got, want) {
		t.Fatalf("Encode:\n%x\nwant\n%x", got, want)
	}
}

// TestDecodeStateRejects corrupts a valid encoding one rule at a time and
// checks that DecodeState reports each through the Decoder, with a message
// that names the rule.
func TestDecodeStateRejects(t *testing.T) {
	skipNFA := mustCompile(t, ckRawPattern(SkipToNext))
	noSkipNFA := mustCompile(t, ckRawPattern(NoSkip))
	s := skipNFA.NewState()
	s.Process(&Event{Time: 1, Seq: 1, Value: map[string]any{"name": "a"}}, nil, nil)
	waitB := s.runs[0].state // the same index in noSkipNFA: only the skip differs

	// base: a partial match that took a1 and waits for b, and a match
	// (a2, b3) held back behind it (SKIP_TO_NEXT).
	base := func() ckRaw {
		return ckRaw{
			version: 1,
			events:  []Event{ckEv(1, 1, "a"), ckEv(2, 2, "a"), ckEv(3, 3, "b")},
			slots:   []int{0},
			entries: [][4]int{{0, 0, 0, 1}},
			runs:    []ckRawRun{{int(waitB), 0, 1, 1}},
			held:    []ckRawHeld{{start: 2, seq: 2, mStart: 2, end: 3, events: [][]int{{1}, {2}}}},
		}
	}
	b := base()
	restored, err := decodeAll(t, skipNFA, b.bytes(skipNFA))
	if err != nil {
		t.Fatalf("base: %v", err)
	}
	checkBuffer(t, restored)
	var got []string
	restored.Process(&Event{Time: 4, Seq: 4, Value: map[string]any{"name": "c"}}, nil, nil)
	restored.Advance(11, func(m Match) { got = append(got, newCkRecorder().format(m.Start, m.End, m.Events)) }, nil)
	if want := []string{"2..3 s0=[#0:2/2:map[name:a]] s1=[#1:3/3:map[name:b]]"}; !slices.Equal(got, want) {
		t.Fatalf("base: released %q, want %q", got, want)
	}

	// chain is three partial matches sharing a1: one took only a1, one
	// took b2 after it, one b3.
	chain := func() ckRaw {
		return ckRaw{
			version: 1,
			events:  []Event{ckEv(1, 1, "a"), ckEv(2, 2, "b"), ckEv(3, 3, "b")},
			slots:   []int{0, 1, 2},
			entries: [][4]int{{0, 0, 0, 3}, {1, 1, 1, 1}, {2, 1, 1, 1}},
			runs:    []ckRawRun{{int(waitB), 0, 1, 1}, {int(waitB), 1, 1, 1}, {int(waitB), 2, 1, 1}},
		}
	}
	c := chain()
	if _, err := decodeAll(t, noSkipNFA, c.bytes(noSkipNFA)); err != nil {
		t.Fatalf("chain: %v", err)
	}

	for _, tc := range []struct {
		name   string
		raw    func() ckRaw
		nfa    *NFA // writes and decodes
		mutate func(r *ckRaw)
		want   string
		writer *NFA // writes instead of nfa
	}{
		{"version", base, skipNFA, func(r *ckRaw) { r.version = 2 }, "unknown version 2", nil},
		{"another pattern", base, noSkipNFA, func(r *ckRaw) {}, "written for another pattern", skipNFA},
		{"dropped", base, skipNFA, func(r *ckRaw) { r.dropped = math.MaxUint64 }, "dropped count", nil},
		{"slot's event out of range", base, skipNFA, func(r *ckRaw) { r.slots[0] = 3 }, "slot 0: event 3 out of range", nil},
		{"slot's event out of order", base, skipNFA, func(r *ckRaw) { r.slots[0] = 1 }, "slot 0: event 1 out of range or out of order", nil},
		{"entry's slot out of range", base, skipNFA, func(r *ckRaw) { r.entries[0][0] = 1 }, "entry 0: slot 1 out of range", nil},
		{"entry's step out of range", base, skipNFA, func(r *ckRaw) { r.entries[0][1] = 2 }, "entry 0: step 2 out of range", nil},
		{"entry is its own predecessor", base, skipNFA, func(r *ckRaw) { r.entries[0][2] = 1 }, "predecessor 0 does not come before it", nil},
		{"predecessor after the entry", chain, noSkipNFA, func(r *ckRaw) { r.entries[1][2] = 3 }, "entry 1: predecessor 2 does not come before it", nil},
		{"steps decrease", chain, noSkipNFA, func(r *ckRaw) { r.entries[0][1], r.entries[1][1] = 1, 0 }, "a branch's steps never decrease", nil},
		{"entry without references", base, skipNFA, func(r *ckRaw) { r.entries[0][3] = 0 }, "entry 0: no reference", nil},
		{"reference count too high", base, skipNFA, func(r *ckRaw) { r.entries[0][3] = 2 }, "entry 0: 2 references recorded, 1 found", nil},
		{"reference count too low", chain, noSkipNFA, func(r *ckRaw) { r.entries[0][3] = 2 }, "entry 0: 2 references recorded, 3 found", nil},
		{"unknown state", base, skipNFA, func(r *ckRaw) { r.runs[0].state = len(skipNFA.states) }, "unknown state", nil},
		{"final state", base, skipNFA, func(r *ckRaw) { r.runs[0].state = int(finalState) }, "is not a waiting state", nil},
		{"run's entry out of range", base, skipNFA, func(r *ckRaw) { r.runs[0].last = 1 }, "partial match 0: entry 1 out of range", nil},
		{"run's start is not its first event", base, skipNFA, func(r *ckRaw) { r.runs[0].start = 0 }, "its first event is 1/1", nil},
		{"run's start seq is not its first event", base, skipNFA, func(r *ckRaw) { r.runs[0].seq = 2 }, "its first event is 1/1", nil},
		{"runs out of start order", chain, noSkipNFA, func(r *ckRaw) {
			// Two partial matches with their own first events, listed
			// newest first.
			r.entries = [][4]int{{0, 0, 0, 1}, {1, 0, 0, 1}}
			r.slots = []int{0, 1}
			r.events = r.events[:2]
			r.events[1] = ckEv(2, 2, "a")
			r.runs = []ckRawRun{{int(waitB), 1, 2, 2}, {int(waitB), 0, 1, 1}}
		}, "partial match 1: out of start order", nil},
		{"entries not in walk order", chain, noSkipNFA, func(r *ckRaw) { r.runs[1].last, r.runs[2].last = 2, 1 }, "entry 1: out of order", nil},
		{"unreferenced slot", base, skipNFA, func(r *ckRaw) { r.slots = append(r.slots, 0) }, "slot 1: no entry refers to it", nil},
		{"unreferenced event", chain, noSkipNFA, func(r *ckRaw) { r.events = append(r.events, ckEv(4, 4, "x")) }, "event 3: nothing refers to it", nil},
		{"held without a skip strategy", base, noSkipNFA, func(r *ckRaw) {}, "held back without a skip strategy", nil},
		{"held match without events", base, skipNFA, func(r *ckRaw) { r.held[0].events = [][]int{{}, {}} }, "held match 0: no events", nil},
		{"held event out of range", base, skipNFA, func(r *ckRaw) { r.held[0].events[1] = []int{3} }, "held match 0: event 3 out of range", nil},
		{"held start is not its first event", base, skipNFA, func(r *ckRaw) { r.held[0].start = 3 }, "held match 0: starts at 3/2", nil},
		{"held matches out of order", base, skipNFA, func(r *ckRaw) {
			// (a2) alone is a prefix of (a2, b3): it sorts first.
			r.held = append(r.held, ckRawHeld{start: 2, seq: 2, mStart: 2, end: 2, events: [][]int{{1}, {}}})
		}, "held match 1: out of order", nil},
		{"held match not blocked", base, skipNFA, func(r *ckRaw) {
			// (a1, a2) starts with the open partial match: emitted already.
			r.held[0] = ckRawHeld{start: 1, seq: 1, mStart: 1, end: 2, events: [][]int{{0}, {1}}}
			r.events = r.events[:2]
		}, "no partial match started before it", nil},
		{"trailing bytes", base, skipNFA, func(r *ckRaw) { r.trailer = []byte{0} }, "1 bytes left", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.raw()
			tc.mutate(&r)
			writer := tc.nfa
			if tc.writer != nil {
				writer = tc.writer
			}
			_, err := decodeAll(t, tc.nfa, r.bytes(writer))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestStateEncodeErrors checks that Encode refuses what it cannot write
// faithfully: a Value enc rejects, and a State in the middle of an event
// (Encode called from a callback).
func TestStateEncodeErrors(t *testing.T) {
	nfa := mustCompile(t, Pattern{Steps: []Step{{Name: "a", Where: ckIs("a")}, {Name: "b", Where: ckIs("b")}}})
	s := nfa.NewState()
	s.Process(&Event{Time: 1, Seq: 1, Value: struct{ name string }{"a"}}, nil, nil)
	s.Process(&Event{Time: 2, Seq: 2, Value: "a"}, nil, nil)
	if err := s.Encode(codec.NewEncoder(nil), encodeValue); err != nil {
		t.Fatalf("the struct-valued event is not buffered (its name is not a): %v", err)
	}
	s = nfa.NewState()
	s.Process(&Event{Time: 1, Seq: 1, Value: map[string]any{"name": "a", "bad": struct{}{}}}, nil, nil)
	if err := s.Encode(codec.NewEncoder(nil), encodeValue); err == nil || !strings.Contains(err.Error(), "cannot encode") {
		t.Fatalf("Encode of an unencodable Value: error %v", err)
	}
	s = nfa.NewState()
	s.Process(&Event{Time: 1, Seq: 1, Value: "a"}, nil, nil)
	var inCallback error
	s.Process(&Event{Time: 2, Seq: 2, Value: "b"}, func(Match) {
		inCallback = s.Encode(codec.NewEncoder(nil), encodeValue)
	}, nil)
	if inCallback == nil || !strings.Contains(inCallback.Error(), "being processed") {
		t.Fatalf("Encode from a match callback: error %v", inCallback)
	}
}
