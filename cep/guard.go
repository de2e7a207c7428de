package cep

// guard is the condition on an NFA transition: the user's conditions combined
// with not and and, as FlinkCEP's compiler combines them (ignore = not where,
// take = where and not until, greedy = and not the loop's take, ...).
// Constants are folded when built, so that an edge whose guard is false is
// never created and true costs nothing to evaluate.
type guard struct {
	op   guardOp
	cond Condition // opCond
	id   int       // opCond: index of cond in partialCtx.memo
	x, y *guard    // opNot: x; opAnd: x, y
}

type guardOp uint8

const (
	opTrue guardOp = iota
	opFalse
	opCond
	opNot
	opAnd
)

var (
	guardTrue  = &guard{op: opTrue}
	guardFalse = &guard{op: opFalse}
)

// condGuard is c as a guard; a nil condition is true. id numbers the
// pattern's conditions, so that each is evaluated once per partial match and
// event however many edges test it.
func condGuard(c Condition, id int) *guard {
	if c == nil {
		return guardTrue
	}
	return &guard{op: opCond, cond: c, id: id}
}

func notGuard(g *guard) *guard {
	switch g.op {
	case opTrue:
		return guardFalse
	case opFalse:
		return guardTrue
	case opNot:
		return g.x
	}
	return &guard{op: opNot, x: g}
}

func andGuard(a, b *guard) *guard {
	switch {
	case a.op == opFalse || b.op == opFalse:
		return guardFalse
	case a.op == opTrue:
		return b
	case b.op == opTrue:
		return a
	}
	return &guard{op: opAnd, x: a, y: b}
}

// eval evaluates g for ev and the partial match p. Conditions are pure, so a
// condition's result is kept in p.memo until p moves to the next partial match.
func (g *guard) eval(ev *Event, p *partialCtx) bool {
	switch g.op {
	case opTrue:
		return true
	case opCond:
		m := &p.memo[g.id]
		if *m == memoUnknown {
			*m = memoFalse
			if g.cond(ev, p) {
				*m = memoTrue
			}
		}
		return *m == memoTrue
	case opNot:
		return !g.x.eval(ev, p)
	case opAnd:
		return g.x.eval(ev, p) && g.y.eval(ev, p)
	}
	return false
}

const (
	memoUnknown uint8 = iota
	memoFalse
	memoTrue
)
