package engine

import (
	"encoding/json"
	"strconv"

	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/service"
	"github.com/vigil-cep/vigil/stream"
	"github.com/vigil-cep/vigil/window"
)

// lookup returns the decision a task holds for an event id of a stream: the
// stored record (rebuilt for a plain allow), the checksum of the event's
// value, and whether it is still waiting for the watermark.
func (t *Task) lookup(streamIdx int, id string) (decision []byte, crc uint32, pending, ok bool) {
	if streamIdx < 0 || streamIdx >= len(t.seen) || t.seen[streamIdx] == nil {
		return nil, 0, false, false
	}
	e, ok := t.seen[streamIdx].get(id)
	if !ok {
		return nil, 0, false, false
	}
	if e.pending != nil {
		return nil, e.crc, true, true
	}
	if e.decision != nil {
		return e.decision, e.crc, false, true
	}
	return appendDecision(nil, id, t.rs.Streams[streamIdx].Name, e.key, e.time, nil), e.crc, false, true
}

// maxDecisionScan bounds how many remembered ids Entity looks through for a
// key's recent decisions (ids are kept by id, not by key).
const maxDecisionScan = 100_000

// Entity returns a view of key's state: recent history per stream (the
// fields rules read), live windows, open partial matches per pattern, and
// its most recent decisions.
func (t *Task) Entity(key string, q service.EntityQuery) *service.Entity {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Decisions <= 0 {
		q.Decisions = 10
	}
	v := &service.Entity{Key: key, History: make(map[string][]json.RawMessage), Windows: []json.RawMessage{},
		Partials: make(map[string]int), Decisions: []json.RawMessage{}, Watermark: t.wm}
	t.thawKey(key, keyHash(key))
	if ks := t.keys.get(key, keyHash(key)); ks != nil && !t.owedSweep(ks) {
		for i, st := range t.rs.Streams {
			h := ks.hist(i)
			if h.len() == 0 || q.Stream != "" && q.Stream != st.Name {
				continue
			}
			// Events past retention are not shown, whether or not their
			// key has evicted them yet (see sweep).
			since := horizon(t.wm, st.Retention)
			vals := h.values(0, h.len(), st.HistoryFields)
			past := h.past()
			var evs []json.RawMessage
			for j := len(past) - 1; j >= 0 && len(evs) < q.Limit && past[j].Time >= since; j-- {
				p := &past[j]
				if q.Before != 0 && p.Time >= q.Before {
					continue
				}
				b := strconv.AppendInt([]byte(`{"time":`), p.Time, 10)
				b = jsonv.Append(append(b, `,"event":`...), rowMap(vals[j], st.HistoryFields))
				evs = append(evs, append(b, '}'))
			}
			v.History[st.Name] = evs
		}
	}
	t.catchUp(key)
	for i, op := range t.windows {
		name := t.rs.Windows[i].Name
		op.Live(key, func(r window.Result) {
			b := jsonv.AppendString([]byte(`{"window":`), name)
			b = appendInt(b, "start", r.Start)
			b = appendInt(b, "end", r.End)
			b = append(appendField(b, "values"), '{')
			for k, a := range t.rs.Windows[i].Aggs {
				if k > 0 {
					b = append(b, ',')
				}
				b = jsonv.Append(append(jsonv.AppendString(b, a.Name), ':'), r.Values[k])
			}
			b = strconv.AppendBool(appendField(append(b, '}'), "fired"), r.Update)
			v.Windows = append(v.Windows, append(b, '}'))
		})
	}
	for _, op := range t.patterns {
		if pk, ok := op.keys[key]; ok {
			v.Partials[op.p.Name] = pk.state.Len()
		}
	}
	for si, s := range t.seen {
		if s == nil {
			continue
		}
		scanned := 0
		for j := s.end() - 1; j >= s.head && scanned < maxDecisionScan && len(v.Decisions) < q.Decisions; j-- {
			scanned++
			id := s.id(j)
			if e, ok := s.get(id); ok && e.key == key && e.pending == nil {
				d, _, _, _ := t.lookup(si, id)
				v.Decisions = append(v.Decisions, d)
			}
		}
	}
	return v
}

// rowMap turns a history value into a JSON-encodable map.
func rowMap(v any, names []string) any {
	if r, ok := v.(*stream.Row); ok {
		return rowFields(r, names)
	}
	return v
}
