package cep

import "math"

// NextDeadline returns the earliest time at which Advance changes the state:
// the first partial match's start plus Within, when it times out (or, in the
// pending state of a trailing negation, completes). It is math.MaxInt64 when
// no such time exists (no Within, or no partial match), so a caller that
// drives many keys advances only those whose deadline the watermark passed.
func (s *State) NextDeadline() int64 {
	if s.nfa.within <= 0 || len(s.runs) == 0 {
		return math.MaxInt64
	}
	return addSat(s.runs[0].start, s.nfa.within) // runs are ordered by start
}
