package engine

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// restoreV1 reads a snapshot of layout 1 (the one builds before incremental
// checkpoints wrote: every section whole, operator by operator), after its
// version number, so that a task upgraded in place restores the checkpoint
// its previous build left. Nothing writes this layout any more.
func (t *Task) restoreV1(d *codec.Decoder) error {
	version := d.String()
	same := version == t.rs.Version
	old := make([]oldStream, d.Count(2))
	for i := range old {
		old[i].name = d.String()
		old[i].fields = make([]string, d.Count(1))
		for j := range old[i].fields {
			old[i].fields[j] = d.String()
		}
		if d.Bool() {
			old[i].fields = nil
		}
		old[i].now, old[i].ok = t.streamIndex(old[i].name)
	}
	t.wm = d.Varint()
	t.lastSweep = d.Varint()
	t.seq = d.Uvarint()
	if vt := d.Varint(); t.vt != nil {
		t.vt.now = vt
	}
	for _, n := range t.stats.counters() {
		*n = d.Varint()
	}
	wmData := d.ByteSlice()
	if sameStreams(old, t.rs.Streams) {
		wd := codec.NewDecoder(wmData)
		if err := t.wms.Decode(wd); err != nil {
			return fmt.Errorf("watermarks: %w", err)
		}
	}
	t.decodeKeys(d, old, same)
	t.decodeSeen(d, old)
	for range d.Count(3) {
		name, print, sub := d.String(), d.String(), d.ByteSlice()
		i := slices.IndexFunc(t.rs.Windows, func(w *rules.Window) bool { return w.Name == name })
		if i >= 0 && d.Err() == nil && print == windowPrint(t.rs.Windows[i]) {
			wd := codec.NewDecoder(sub)
			if err := t.windows[i].Decode(wd); err != nil || wd.Finish() != nil {
				return fmt.Errorf("window %s: %w", name, cmp.Or(err, wd.Err()))
			}
		}
	}
	for range d.Count(3) {
		name, print, sub := d.String(), d.String(), d.ByteSlice()
		i := slices.IndexFunc(t.patterns, func(op *patternOp) bool { return op.p.Name == name })
		if i >= 0 && d.Err() == nil && print == t.patternPrint(name) {
			if err := t.decodePattern(codec.NewDecoder(sub), t.patterns[i]); err != nil {
				return fmt.Errorf("pattern %s: %w", name, err)
			}
		}
	}
	for range d.Count(3) {
		k, b := recallKey{d.String(), d.String()}, d.ByteSlice()
		if d.Err() == nil {
			if t.recall == nil {
				t.recall = make(map[recallKey][]byte)
			}
			t.recall[k] = b
		}
	}
	for range d.Count(6) {
		p := &pendingDecision{stream: d.Int(), id: d.String(), key: d.String(), time: d.Varint(), seq: d.Uvarint()}
		p.fields, _ = d.Value().(map[string]any)
		p.repeats = d.Int()
		if d.Err() != nil {
			break
		}
		if p.stream >= len(old) {
			d.Fail("pending decision of stream %d of %d", p.stream, len(old))
			break
		}
		o := old[p.stream]
		if !o.ok || t.rs.Streams[o.now].Decide == rules.DecideNever {
			continue // the running version no longer decides that stream
		}
		p.stream = o.now
		heap.Push(&t.due, p)
		if s := t.seen[p.stream]; s != nil {
			if e := s.ref(p.id); e != nil {
				e.pending = p
			}
		}
	}
	for range d.Count(3) {
		name, print, sub := d.String(), d.String(), d.ByteSlice()
		i := slices.IndexFunc(t.joins, func(jo *joinOp) bool { return jo.j.Name == name })
		if i >= 0 && d.Err() == nil && print == fmt.Sprintf("%+v", t.joins[i].j.Spec) {
			jd := codec.NewDecoder(sub)
			if err := t.joins[i].op.Decode(jd, decodeEvent); err != nil || jd.Finish() != nil {
				return fmt.Errorf("join %s: %w", name, cmp.Or(err, jd.Err()))
			}
		}
	}
	t.decodeFeatures(d, old)
	if err := d.Finish(); err != nil {
		return fmt.Errorf("task snapshot: %w", err)
	}
	return nil
}

func (t *Task) decodeKeys(d *codec.Decoder, old []oldStream, same bool) {
	for range d.Count(3) {
		key := d.String()
		lastTime := d.Varint()
		ks := t.keyState(key, keyHash(key))
		t.idle.touch(ks, lastTime)
		for range d.Count(2) {
			si := d.Int()
			if si >= len(old) {
				d.Fail("history of stream %d of %d", si, len(old))
				return
			}
			o := old[si]
			n := d.Count(4)
			for range n {
				ts := d.Varint()
				var v any
				if d.Bool() {
					v = stream.DecodeRow(d, o.fields)
				} else {
					v = d.Value()
				}
				m := rules.Mark{Set: d.Uvarint(), Failed: d.Uvarint()}
				if ne := d.Int(); ne > 0 {
					errs := make([]string, 0, min(ne-1, d.Len()))
					for range ne - 1 {
						errs = append(errs, d.String())
					}
					m.Errs = &errs
				}
				if d.Err() != nil || !o.ok {
					continue
				}
				st := t.rs.Streams[o.now]
				if st.Retention == 0 {
					continue
				}
				if !same {
					// Another ruleset version: re-project to the fields its
					// rules read and recompute the element predicates.
					fields := rowFields(v, o.fields)
					v, m = project(fields, st.HistoryFields), t.ev.Mark(o.now, rules.MapFields(fields))
				}
				ks.hist(o.now).add(ts, v, m)
			}
		}
	}
}

func (t *Task) decodeSeen(d *codec.Decoder, old []oldStream) {
	for range d.Count(2) {
		si := d.Int()
		if si >= len(old) {
			d.Fail("ids of stream %d of %d", si, len(old))
			return
		}
		o := old[si]
		var s *seenIDs
		if o.ok {
			s = t.seen[o.now]
		}
		for range d.Count(4) {
			id, key, ts, dec, crc := d.String(), d.String(), d.Varint(), d.ByteSlice(), uint32(d.Uvarint())
			if s != nil && d.Err() == nil {
				s.put(id, seen{key: key, time: ts, decision: dec, crc: crc})
			}
		}
	}
}

func (t *Task) decodePattern(d *codec.Decoder, op *patternOp) error {
	op.dropped = d.Varint()
	for range d.Count(4) {
		pk := op.keyState(d.String())
		pk.clock = d.Varint()
		due := d.Varint()
		buf := make([]*cep.Event, d.Count(3))
		for i := range buf {
			buf[i] = &cep.Event{Time: d.Varint(), Seq: d.Uvarint(), Value: decodeEvent(d)}
		}
		pk.buf = buf
		if st := op.nfa.DecodeState(d, decodeEvent); st != nil {
			pk.state = st
		}
		if d.Err() != nil {
			return d.Err()
		}
		if due != stream.MaxTime {
			pk.due = due
			heap.Push(&op.due, dueEntry{at: due, key: pk})
		}
	}
	return d.Finish()
}

// decodeFeatures reads what encodeFeatures wrote, when the snapshot has it.
// Features of ids the running version does not remember are dropped.
func (t *Task) decodeFeatures(d *codec.Decoder, old []oldStream) {
	if d.Len() == 0 {
		return
	}
	for range d.Count(2) {
		si := d.Int()
		if si >= len(old) {
			d.Fail("features of stream %d of %d", si, len(old))
			return
		}
		var s *seenIDs
		if o := old[si]; o.ok {
			s = t.seen[o.now]
		}
		for range d.Count(2) {
			id, b := d.String(), d.ByteSlice()
			if s == nil || d.Err() != nil {
				continue
			}
			if slot, found := s.find(id); found {
				if s.features == nil {
					s.features = make(map[string][]byte)
				}
				s.features[s.at(s.index(s.table[slot])).id] = b
			}
		}
	}
}
