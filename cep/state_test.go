package cep

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func name(prefix string) Condition {
	return func(ev *Event, _ Partial) bool { return strings.HasPrefix(ev.Value.(string), prefix) }
}

func mustCompile(t testing.TB, p Pattern, opts ...Option) *NFA {
	t.Helper()
	n, err := Compile(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkBuffer verifies the buffer's reference counts against the partial
// matches: every live entry is referred to by as many partial matches and
// successor entries as its count says, and every live event by its entries.
func checkBuffer(t *testing.T, s *State) {
	t.Helper()
	b := &s.buf
	free := make(map[int32]bool)
	for _, e := range b.freeEntries {
		free[e] = true
	}
	refs := make([]int32, len(b.entries))
	evRefs := make([]int32, len(b.events))
	for _, r := range s.runs {
		if r.last >= 0 {
			refs[r.last]++
		}
	}
	for i, en := range b.entries {
		if free[int32(i)] {
			continue
		}
		evRefs[en.ev]++
		if en.pred >= 0 {
			refs[en.pred]++
		}
	}
	for i, en := range b.entries {
		if !free[int32(i)] && en.refs != refs[i] {
			t.Fatalf("entry %d: refs %d, referred to %d times", i, en.refs, refs[i])
		}
	}
	live := 0
	for i, sl := range b.events {
		if sl.ev != nil {
			live++
			if sl.refs != evRefs[i] {
				t.Fatalf("event %d: refs %d, referred to %d times", i, sl.refs, evRefs[i])
			}
		}
	}
	if live != b.live {
		t.Fatalf("%d events live, Buffered says %d", live, b.live)
	}
}

// TestCapAdversarial feeds 1,000 start events of a one_or_more with
// allow_combinations, which never completes and doubles its partial matches
// with every event: the state stays at the cap, and the buffer and its memory
// stop growing.
func TestCapAdversarial(t *testing.T) {
	nfa := mustCompile(t, Pattern{Steps: []Step{
		{Name: "a", Where: name("a"), Min: 1, Max: -1, Inner: Any},
		{Name: "b", Where: name("b")},
	}})
	s := nfa.NewState()
	var entriesCap, eventsCap, runsCap int
	for i := range 1000 {
		s.Process(&Event{Time: int64(i), Seq: uint64(i + 1), Value: "a"}, func(Match) { t.Fatal("match") }, nil)
		if s.Len() > DefaultMaxPartials {
			t.Fatalf("event %d: %d partial matches, cap %d", i, s.Len(), DefaultMaxPartials)
		}
		if i == 500 {
			entriesCap, eventsCap, runsCap = cap(s.buf.entries), cap(s.buf.events), cap(s.runs)+cap(s.nfa.work.next)
		}
	}
	if s.Len() != DefaultMaxPartials {
		t.Fatalf("Len = %d, want the cap %d", s.Len(), DefaultMaxPartials)
	}
	// 2^14 > 10,000: the partial matches kept all started within the last
	// 15 events.
	if s.Buffered() > 15 {
		t.Fatalf("Buffered = %d, want at most 15", s.Buffered())
	}
	if s.Dropped() == 0 {
		t.Fatal("Dropped = 0")
	}
	if cap(s.buf.entries) != entriesCap || cap(s.buf.events) != eventsCap || cap(s.runs)+cap(s.nfa.work.next) != runsCap {
		t.Fatalf("memory grew after event 500: entries %d -> %d, events %d -> %d, runs %d -> %d",
			entriesCap, cap(s.buf.entries), eventsCap, cap(s.buf.events), runsCap, cap(s.runs)+cap(s.nfa.work.next))
	}
	checkBuffer(t, s)
	t.Logf("len %d, buffered %d, dropped %d, entries %d", s.Len(), s.Buffered(), s.Dropped(), len(s.buf.entries)-len(s.buf.freeEntries))
}

// TestBufferReleased runs random patterns with every feature over random
// streams and checks the buffer's reference counts after every call, and that
// everything is released once the watermark passes the end: Buffered returns
// to 0 when all partial matches have completed, timed out or (without within)
// ended with the input.
func TestBufferReleased(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for compiled := 0; compiled < 1000; {
		p := randomFullPattern(rng)
		if compiled%4 == 3 {
			p.Within = 0 // the end of the input must end loops that nothing else ends
		}
		nfa, err := Compile(p, MaxPartials(1+rng.IntN(50)))
		if err != nil {
			continue
		}
		compiled++
		s := nfa.NewState()
		var now int64
		for i := range 30 {
			now += int64(rng.IntN(3))
			s.Process(&Event{Time: now, Seq: uint64(i + 1), Value: string(alphabet[rng.IntN(len(alphabet))])}, nil, nil)
			checkBuffer(t, s)
			if rng.IntN(5) == 0 {
				s.Advance(now+int64(rng.IntN(5)), nil, nil)
				checkBuffer(t, s)
			}
		}
		s.Advance(math.MaxInt64, nil, nil)
		if !s.Empty() || s.Buffered() != 0 || len(s.buf.freeEntries) != len(s.buf.entries) || len(s.buf.freeEvents) != len(s.buf.events) {
			t.Fatalf("pattern %s: after the end, Len %d, Buffered %d, entries %d/%d free",
				describe(p), s.Len(), s.Buffered(), len(s.buf.freeEntries), len(s.buf.entries))
		}
	}
}

// randomFullPattern is a random pattern that may use every feature: within,
// negation, until, greedy, skip strategies. Some are invalid.
func randomFullPattern(rng *rand.Rand) Pattern {
	p := randomPattern(rng)
	p.Within = 1 + int64(rng.IntN(10))
	for i := range p.Steps {
		s := &p.Steps[i]
		switch rng.IntN(6) {
		case 0:
			if i > 0 {
				*s = Step{Name: s.Name, Where: s.Where, Not: Negation(1 + rng.IntN(2))}
			}
		case 1:
			if s.Max == -1 {
				s.Until = name(string(alphabet[rng.IntN(len(alphabet))]))
			}
		case 2:
			s.Greedy = s.Min != 1 || s.Max != 1
		}
	}
	p.Skip.Kind = SkipKind(rng.IntN(5))
	if p.Skip.Kind == SkipToFirst || p.Skip.Kind == SkipToLast {
		p.Skip.Step = p.Steps[rng.IntN(len(p.Steps))].Name
	}
	return p
}

// TestEmitOrder checks that matches completed by one event are emitted in
// start order, then by their events.
func TestEmitOrder(t *testing.T) {
	nfa := mustCompile(t, Pattern{Steps: []Step{
		{Name: "a", Where: name("a")},
		{Name: "b", Where: name("b"), Min: 1, Max: 2, Contiguity: Any, Inner: Any, Optional: true},
		{Name: "c", Where: name("c"), Contiguity: Any},
	}})
	s := nfa.NewState()
	var got []string
	for i, v := range strings.Fields("a1 a2 b1 b2 c") {
		s.Process(&Event{Time: int64(i), Seq: uint64(i + 1), Value: v}, func(m Match) {
			var names []string
			for _, evs := range m.Events {
				for _, e := range evs {
					names = append(names, e.Value.(string))
				}
			}
			got = append(got, strings.Join(names, " "))
		}, nil)
	}
	want := []string{
		"a1 b1 b2 c", "a1 b1 c", "a1 b2 c", "a1 c",
		"a2 b1 b2 c", "a2 b1 c", "a2 b2 c", "a2 c",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("emit order (-want +got):\n%s", diff)
	}
}

// TestOutOfOrder feeds a start event older than an open partial match: the
// partial matches stay ordered by start, so that the oldest is the one the
// cap drops and the first to time out.
func TestOutOfOrder(t *testing.T) {
	nfa := mustCompile(t, Pattern{Within: 10, Steps: []Step{
		{Name: "a", Where: name("a")},
		{Name: "b", Where: name("b")},
	}}, MaxPartials(2))
	s := nfa.NewState()
	for i, ev := range []*Event{{Time: 5, Seq: 1, Value: "a5"}, {Time: 3, Seq: 2, Value: "a3"}, {Time: 4, Seq: 3, Value: "a4"}} {
		s.Process(ev, nil, nil)
		if i == 1 && (s.runs[0].start != 3 || s.runs[1].start != 5) {
			t.Fatalf("runs start at %d, %d; want 3, 5", s.runs[0].start, s.runs[1].start)
		}
	}
	if s.Dropped() != 1 || s.runs[0].start != 4 || s.runs[1].start != 5 {
		t.Fatalf("after the cap: dropped %d, runs start at %d, %d; want 1, 4, 5", s.Dropped(), s.runs[0].start, s.runs[1].start)
	}
	var timedOut []int64
	s.Advance(14, nil, func(to Timeout) { timedOut = append(timedOut, to.Start) })
	if diff := cmp.Diff([]int64{4}, timedOut); diff != "" {
		t.Fatalf("timeouts (-want +got):\n%s", diff)
	}
}

// TestNoAllocs checks that processing allocates nothing in steady state, with
// a condition that reads the partial match, when nothing completes.
func TestNoAllocs(t *testing.T) {
	nfa := mustCompile(t, atoPattern())
	s := nfa.NewState()
	events := atoStream(1000, 0)
	i := 0
	feed := func() {
		s.Process(events[i%len(events)], nil, nil)
		i++
	}
	for range 2 * len(events) {
		feed()
	}
	if n := testing.AllocsPerRun(1000, feed); n != 0 {
		t.Fatalf("%v allocations per event", n)
	}
}

// TestAdvanceEnd checks that time arithmetic at the ends of the range does
// not overflow: an Advance to the end of a bounded input (math.MaxInt64) ends
// a partial match that started at a negative time, and one that started
// within the window of the end ends too (no event can follow it), its
// trailing negation completing at the saturated Start + Within.
func TestAdvanceEnd(t *testing.T) {
	nfa := mustCompile(t, Pattern{Within: 10, Steps: []Step{
		{Name: "a", Where: name("a")},
		{Name: "b", Where: name("b"), Not: NotFollowedBy},
	}})
	s := nfa.NewState()
	s.Process(&Event{Time: -5, Seq: 1, Value: "a"}, nil, nil)
	s.Process(&Event{Time: math.MaxInt64 - 3, Seq: 2, Value: "a"}, func(m Match) {
		if m.End != 5 {
			t.Fatalf("match ends at %d, want 5", m.End)
		}
	}, nil)
	var ends []int64
	s.Advance(math.MaxInt64, func(m Match) { ends = append(ends, m.End) }, nil)
	if diff := cmp.Diff([]int64{math.MaxInt64}, ends); diff != "" || !s.Empty() {
		t.Fatalf("at the end: match ends (-want +got):\n%s; Len %d", diff, s.Len())
	}
}

// TestConditionOnce checks that a condition runs once per partial match and
// event, although a relaxed step tests it on two edges (take, and ignore as
// its negation).
func TestConditionOnce(t *testing.T) {
	calls := 0
	nfa := mustCompile(t, Pattern{Steps: []Step{
		{Name: "a", Where: name("a")},
		{Name: "b", Where: func(ev *Event, _ Partial) bool { calls++; return ev.Value == "b" }},
	}})
	s := nfa.NewState()
	for i, v := range strings.Fields("a x x x") {
		s.Process(&Event{Time: int64(i), Seq: uint64(i + 1), Value: v}, nil, nil)
	}
	if calls != 3 {
		t.Fatalf("b's condition ran %d times for 3 events of one partial match", calls)
	}
}

// TestNextDeadline checks the time at which Advance next changes a state:
// the oldest partial match's start plus Within.
func TestNextDeadline(t *testing.T) {
	steps := []Step{{Name: "a", Where: name("a")}, {Name: "b", Where: name("b")}}
	s := mustCompile(t, Pattern{Within: 10, Steps: steps}).NewState()
	var got []int64
	got = append(got, s.NextDeadline())
	s.Process(&Event{Time: 3, Seq: 1, Value: "a"}, nil, nil)
	got = append(got, s.NextDeadline())
	s.Process(&Event{Time: 5, Seq: 2, Value: "a"}, nil, nil)
	got = append(got, s.NextDeadline())
	s.Advance(13, nil, nil)
	got = append(got, s.NextDeadline())
	s.Advance(15, nil, nil)
	got = append(got, s.NextDeadline())
	if diff := cmp.Diff([]int64{math.MaxInt64, 13, 13, 15, math.MaxInt64}, got); diff != "" {
		t.Fatalf("deadlines (-want +got):\n%s", diff)
	}
	s = mustCompile(t, Pattern{Steps: steps}).NewState()
	s.Process(&Event{Time: 3, Seq: 1, Value: "a"}, nil, nil)
	if d := s.NextDeadline(); d != math.MaxInt64 {
		t.Fatalf("without within: NextDeadline = %d", d)
	}
}
