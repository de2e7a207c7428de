package engine

import (
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/join"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// joinOp runs one interval join for every key of a task (docs/design.md
// "Interval joins"): pairs are emitted as soon as both sides are present, and
// become events of the join's derived stream at the later of the two times.
type joinOp struct {
	j    *rules.Join
	op   *join.Operator
	emit func(join.Pair) // built once; reads Task.joinKey
}

// feedJoin hands an event to one side of a join, or reports it late.
func (t *Task) feedJoin(ji int, side join.Side, ev *stream.Event) {
	jo := t.joins[ji]
	t.seq++
	saved := t.joinKey
	t.joinKey = ev.Key
	if !jo.op.Add(ev.Key, side, &join.Element{Time: ev.Time, Seq: t.seq, Value: ev}, t.wm, jo.emit) {
		t.emitLate("join", jo.j.Name, ev.Stream, ev.Key, ev.Time, ev.Raw)
	}
	t.joinKey = saved
}

// onPair checks the join's condition, emits the join record and feeds the
// pair, as an event of the join's stream, to what reads that stream.
func (t *Task) onPair(ji int, p join.Pair) {
	j := t.joins[ji].j
	left, right := p.Left.Value.(*stream.Event), p.Right.Value.(*stream.Event)
	ok, err := t.ev.JoinWhere(ji, left.Value, right.Value)
	if err != nil {
		t.stats.RuleErrors++
		return
	}
	if !ok {
		return
	}
	fields, err := t.ev.JoinValue(ji, left.Value, right.Value)
	if err != nil {
		t.stats.RuleErrors++
		return
	}
	key := t.joinKey
	t.stats.Joins++
	b := appendKind(t.buf[:0], KindJoin)
	b = appendStr(b, "join", j.Name)
	b = appendStr(b, "key", key)
	b = appendInt(b, "time", p.Time)
	b = appendRaw(b, "left", left.Raw)
	b = appendRaw(b, "right", right.Raw)
	t.buf = append(b, '}')
	t.out(Output{Kind: KindJoin, Key: key, Value: t.buf})

	t.processDerived(&stream.Event{Stream: j.Derived, Key: key, Time: p.Time, Value: fields, Raw: string(jsonv.Append(nil, fields))})
}
