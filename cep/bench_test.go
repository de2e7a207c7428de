package cep

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

type login struct {
	status string
	ip     string
}

// atoPattern is the account-takeover pattern of examples/fraud.yaml
// (docs/design.md "Patterns"): three consecutive failed logins, then right
// after them a successful one from an IP none of the failures came from,
// within 5 minutes.
func atoPattern() Pattern {
	return Pattern{
		Within: 5 * 60 * 1000,
		Skip:   Skip{Kind: SkipPastLastEvent},
		Steps: []Step{
			{Name: "failed", Min: 3, Max: 3, Inner: Strict, Where: func(ev *Event, _ Partial) bool {
				return ev.Value.(*login).status == "FAILED"
			}},
			{Name: "success", Contiguity: Strict, Where: func(ev *Event, p Partial) bool {
				l := ev.Value.(*login)
				return l.status == "SUCCESS" && !slices.ContainsFunc(p.Events(0), func(f *Event) bool {
					return f.Value.(*login).ip == l.ip
				})
			}},
		},
	}
}

// atoStream is n logins of one user, 10 to 60 s apart, from 4 IPs. With
// success probability pSuccess in [0, 1]: 0 never completes a match.
func atoStream(n int, pSuccess float64) []*Event {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	events := make([]*Event, n)
	var t int64
	for i := range events {
		t += 10_000 + rng.Int64N(50_000)
		l := &login{status: "FAILED", ip: "10.0.0." + strconv.Itoa(rng.IntN(4))}
		if rng.Float64() < pSuccess {
			l.status = "SUCCESS"
		}
		events[i] = &Event{Time: t, Seq: uint64(i + 1), Value: l}
	}
	return events
}

// BenchmarkATO measures events per second through the account-takeover
// pattern over a long stream of one key, where about 4% of the windows of
// four logins complete a match.
func BenchmarkATO(b *testing.B) {
	nfa := mustCompile(b, atoPattern())
	events := atoStream(100_000, 0.2)
	s := nfa.NewState()
	matches := 0
	onMatch := func(Match) { matches++ }
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == len(events) {
			i, s = 0, nfa.NewState()
		}
		s.Process(events[i], onMatch, nil)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(matches)/float64(b.N), "matches/event")
}

// BenchmarkPartialBytes measures the heap a State holds per open partial
// match (B/partial), and the time to build one with its partial matches.
// a_then_b keeps one partial match per event; oneOrMore_any keeps partial
// matches that share prefixes, at the cap.
func BenchmarkPartialBytes(b *testing.B) {
	for _, bc := range []struct {
		name   string
		p      Pattern
		events int
	}{
		{"a_then_b", Pattern{Steps: []Step{{Name: "a", Where: name("a")}, {Name: "b", Where: name("b")}}}, 2_000},
		{"oneOrMore_any", Pattern{Steps: []Step{{Name: "a", Where: name("a"), Min: 1, Max: -1, Inner: Any}, {Name: "b", Where: name("b")}}}, 20},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nfa := mustCompile(b, bc.p)
			events := make([]*Event, bc.events)
			for i := range events {
				events[i] = &Event{Time: int64(i), Seq: uint64(i + 1), Value: "a"}
			}
			build := func() *State {
				s := nfa.NewState()
				for _, ev := range events {
					s.Process(ev, nil, nil)
				}
				return s
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := build()
			runtime.GC()
			runtime.ReadMemStats(&after)
			perPartial := float64(after.HeapAlloc-before.HeapAlloc) / float64(s.Len())
			runtime.KeepAlive(s)

			b.ReportAllocs()
			for b.Loop() {
				build()
			}
			b.ReportMetric(perPartial, "B/partial")
			b.ReportMetric(float64(s.Len()), "partials")
		})
	}
}
