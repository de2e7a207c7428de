package engine

import (
	"container/heap"

	"github.com/vigil-cep/vigil/rules"
)

// pendingDecision is an event of a decide: watermark stream waiting for the
// watermark to pass its time (docs/design.md "Decisions").
type pendingDecision struct {
	stream  int
	id, key string
	time    int64
	seq     uint64 // arrival order, for events of equal time
	fields  map[string]any
	repeats int // duplicates that arrived meanwhile: each gets the decision too
}

// pendingHeap orders pending decisions by time, then arrival.
type pendingHeap []*pendingDecision

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if h[i].time != h[j].time {
		return h[i].time < h[j].time
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(*pendingDecision)) }
func (h *pendingHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}

func (t *Task) deferDecision(st *rules.Stream, id, key string, ts int64, fields map[string]any) *pendingDecision {
	t.seq++
	p := &pendingDecision{stream: st.Index, id: id, key: key, time: ts, seq: t.seq, fields: fields}
	heap.Push(&t.due, p)
	return p
}

// decideDue decides, in event-time order, the pending events the watermark
// wm has passed. It runs after patterns and windows have moved to wm, so the
// state a decision reads holds every on-time event up to its time.
func (t *Task) decideDue(wm int64) {
	for len(t.due) > 0 && t.due[0].time <= wm {
		p := heap.Pop(&t.due).(*pendingDecision)
		st := t.rs.Streams[p.stream]
		ks := t.keyState(p.key, keyHash(p.key))
		t.idle.touch(ks, p.time) // listed again, should a sweep have forgotten the key
		var stored []byte
		if b, ok := t.recalled(st, p.id, st.HasID); ok {
			t.stats.Decisions++
			t.out(Output{Kind: KindDecision, Key: p.id, Value: b})
			stored = b
		} else {
			stored = t.decide(st, p.id, ks, p.time, rules.MapFields(p.fields))
		}
		if s := t.seen[p.stream]; s != nil {
			if e, ok := s.settle(p.id, p, stored); ok {
				t.logID(p.stream, p.id)
				for range p.repeats {
					t.reemit(st, p.id, e)
				}
			}
		}
	}
}
