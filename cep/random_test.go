package cep

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var seedFlag = flag.Uint64("seed", 0, "seed of TestDifferential (0: from the clock)")

// TestDifferential checks the NFA against a brute-force matcher on thousands
// of random patterns and short random streams. The brute force enumerates the
// labelled subsequences of the stream that the definitions allow:
//
//   - a match takes events in stream order, each under a step, steps in order;
//     step i takes between Min and Max events, or none if it is optional;
//   - every event a step takes satisfies its condition;
//   - between two consecutive events of a match, the events skipped are
//     governed by the contiguity of the step that takes the second one: its
//     Inner contiguity when both belong to the step, else its Contiguity
//     (the optional steps in between were skipped). Strict skips nothing;
//     Relaxed skips only events its condition rejects (it takes the first
//     match); Any skips anything;
//   - nothing constrains what comes before the first event;
//   - with within, the last event's time minus the first's is below it.
//
// Every match is emitted once, by the event that completes it. Patterns use
// no until, negation or greedy, and NO_SKIP: the brute force does not define
// them. Matches are compared as multisets.
func TestDifferential(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	patterns := 3000
	if testing.Short() {
		patterns = 300
	}
	total := 0
	for range patterns {
		p := randomPattern(rng)
		nfa, err := Compile(p)
		if err != nil {
			t.Fatalf("Compile(%s): %v", describe(p), err)
		}
		for range 5 {
			stream, times := randomStream(rng)
			want := bruteForce(p, stream, times)
			got := runNFA(t, nfa, p, stream, times)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("pattern %s, stream %s: matches differ (-brute force +NFA):\n%s", describe(p), strings.Join(stream, " "), diff)
			}
			total += len(want)
		}
	}
	t.Logf("%d patterns, %d matches compared", patterns, total)
}

const alphabet = "abcd"

func randomPattern(rng *rand.Rand) Pattern {
	steps := make([]Step, 2+rng.IntN(2))
	for i := range steps {
		s := &steps[i]
		s.Name = fmt.Sprintf("s%d", i)
		var accept []byte
		for accept == nil {
			for j := range len(alphabet) {
				if rng.IntN(3) == 0 {
					accept = append(accept, alphabet[j])
				}
			}
		}
		s.Where = func(ev *Event, _ Partial) bool { return strings.Contains(string(accept), ev.Value.(string)) }
		s.Contiguity = Contiguity(rng.IntN(3))
		switch rng.IntN(5) {
		case 0:
			s.Min, s.Max = 1, 1
		case 1:
			n := 1 + rng.IntN(3)
			s.Min, s.Max = n, n
		case 2:
			s.Min = rng.IntN(3)
			s.Max = max(1, s.Min) + rng.IntN(2)
		case 3:
			s.Min, s.Max = 1, -1
		case 4:
			s.Min, s.Max = 1+rng.IntN(2), -1
		}
		s.Optional = rng.IntN(3) == 0
		if s.Min != 1 || s.Max != 1 {
			s.Inner = Contiguity(rng.IntN(3))
		}
	}
	p := Pattern{Steps: steps}
	if rng.IntN(2) == 0 {
		p.Within = 1 + int64(rng.IntN(5))
	}
	return p
}

// randomStream returns event names and their times, which increase by 0 to 2.
func randomStream(rng *rand.Rand) ([]string, []int64) {
	stream := make([]string, 1+rng.IntN(8))
	times := make([]int64, len(stream))
	for i := range stream {
		stream[i] = string(alphabet[rng.IntN(len(alphabet))])
		if i > 0 {
			times[i] = times[i-1] + int64(rng.IntN(3))
		}
	}
	return stream, times
}

func describe(p Pattern) string {
	var b strings.Builder
	names := []string{"relaxed", "strict", "any"}
	for i, s := range p.Steps {
		accept := ""
		for _, c := range alphabet {
			if s.Where(&Event{Value: string(c)}, nil) {
				accept += string(c)
			}
		}
		fmt.Fprintf(&b, "[%s: in=%s contiguity=%s times=%d,%d inner=%s optional=%t]", s.Name, accept, names[s.Contiguity], s.Min, s.Max, names[s.Inner], s.Optional)
		if i < len(p.Steps)-1 {
			b.WriteByte(' ')
		}
	}
	if p.Within > 0 {
		fmt.Fprintf(&b, " within=%d", p.Within)
	}
	return b.String()
}

// label is one event taken by a match: its position in the stream and step.
type label struct{ pos, step int }

func formatMatch(ls []label) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:s%d", l.pos, l.step)
	}
	return b.String()
}

// bruteForce returns every match of p in stream, formatted and sorted.
func bruteForce(p Pattern, stream []string, times []int64) []string {
	steps := slices.Clone(p.Steps)
	for i := range steps {
		if steps[i].Min == 0 {
			steps[i].Optional, steps[i].Min = true, 1
		}
	}
	accepts := func(step, pos int) bool { return steps[step].Where(&Event{Value: stream[pos]}, nil) }
	// gapOK reports whether the events strictly between p and q may be
	// skipped under contiguity k of step.
	gapOK := func(k Contiguity, step, p, q int) bool {
		switch k {
		case Strict:
			return q == p+1
		case Relaxed:
			for x := p + 1; x < q; x++ {
				if accepts(step, x) {
					return false
				}
			}
		}
		return true
	}
	optionalBetween := func(from, to int) bool { // steps from..to-1 may be skipped
		for j := from; j < to; j++ {
			if !steps[j].Optional {
				return false
			}
		}
		return true
	}
	var out []string
	var path []label
	var extend func(step, count int)
	extend = func(step, count int) {
		last := path[len(path)-1].pos
		if p.Within > 0 && times[last]-times[path[0].pos] >= p.Within {
			return
		}
		if count >= steps[step].Min && optionalBetween(step+1, len(steps)) {
			out = append(out, formatMatch(path))
		}
		for q := last + 1; q < len(stream); q++ {
			// Another event of the same step.
			if (steps[step].Max == -1 || count < steps[step].Max) && accepts(step, q) && gapOK(steps[step].Inner, step, last, q) {
				path = append(path, label{q, step})
				extend(step, count+1)
				path = path[:len(path)-1]
			}
			// The first event of a later step.
			if count < steps[step].Min {
				continue
			}
			for next := step + 1; next < len(steps) && optionalBetween(step+1, next); next++ {
				if accepts(next, q) && gapOK(steps[next].Contiguity, next, last, q) {
					path = append(path, label{q, next})
					extend(next, 1)
					path = path[:len(path)-1]
				}
			}
		}
	}
	for q := range stream {
		for first := 0; first < len(steps) && optionalBetween(0, first); first++ {
			if accepts(first, q) {
				path = append(path[:0], label{q, first})
				extend(first, 1)
			}
		}
	}
	slices.Sort(out)
	return out
}

// runNFA feeds stream to a new State and returns its matches, formatted and
// sorted. It fails the test if a match is emitted by another event than its
// last one.
func runNFA(t *testing.T, nfa *NFA, p Pattern, stream []string, times []int64) []string {
	t.Helper()
	events := make([]*Event, len(stream))
	for i, name := range stream {
		events[i] = &Event{Time: times[i], Seq: uint64(i + 1), Value: name}
	}
	s := nfa.NewState()
	var out []string
	for i, ev := range events {
		s.Process(ev, func(m Match) {
			var ls []label
			for step, evs := range m.Events {
				for _, e := range evs {
					ls = append(ls, label{int(e.Seq) - 1, step})
				}
			}
			if last := ls[len(ls)-1].pos; last != i || m.End != ev.Time || m.Start != times[ls[0].pos] {
				t.Fatalf("pattern %s, stream %s: match %s emitted by event %d", describe(p), strings.Join(stream, " "), formatMatch(ls), i)
			}
			out = append(out, formatMatch(ls))
		}, nil)
	}
	slices.Sort(out)
	return out
}
