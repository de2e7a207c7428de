package engine

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// snapshotVersion is the layout of Task.Snapshot; Restore refuses others.
const snapshotVersion = 1

// Snapshot serialises everything the task owns — watermarks, per-key
// history, remembered ids and their decisions, windows, pattern buffers and
// partial matches, join buffers, counters — so that Restore on a fresh task
// continues exactly where this one stands (docs/design.md "Delivery"). The bytes
// depend only on the state (keys in sorted order), not on map order.
//
// Operators are written under their names, so that a task restoring under a
// new ruleset version keeps the state of what the new version still has:
// history is re-projected to the fields the new rules read, a window or join
// keeps its state if its spec is unchanged, a pattern if its document is.
func (t *Task) Snapshot() ([]byte, error) {
	// Room for the previous snapshot and an eighth more: growing the
	// buffer by doubling copied and cleared about twice the snapshot's
	// size, and the garbage made the collector run during the encode.
	e := codec.NewEncoder(make([]byte, 0, max(1<<16, t.snapshotSize+t.snapshotSize/8)))
	e.Uvarint(snapshotVersion)
	e.String(t.rs.Version)
	e.Int(len(t.rs.Streams))
	for _, st := range t.rs.Streams {
		e.String(st.Name)
		e.Int(len(st.HistoryFields))
		for _, f := range st.HistoryFields {
			e.String(f)
		}
		e.Bool(st.HistoryFields == nil)
	}
	e.Varint(t.wm)
	e.Varint(t.lastSweep)
	e.Uvarint(t.seq)
	vt := stream.MinTime
	if t.vt != nil {
		vt = t.vt.now
	}
	e.Varint(vt)
	for _, n := range t.stats.counters() {
		e.Varint(*n)
	}
	var wm codec.Encoder
	t.wms.Encode(&wm)
	e.ByteSlice(wm.Bytes())

	if err := t.encodeKeys(e); err != nil {
		return nil, err
	}
	t.encodeSeen(e)
	e.Int(len(t.windows))
	for i, op := range t.windows {
		var sub codec.Encoder
		if err := op.Encode(&sub); err != nil {
			return nil, fmt.Errorf("window %s: %w", t.rs.Windows[i].Name, err)
		}
		e.String(t.rs.Windows[i].Name)
		e.String(windowPrint(t.rs.Windows[i]))
		e.ByteSlice(sub.Bytes())
	}
	e.Int(len(t.patterns))
	for _, op := range t.patterns {
		var sub codec.Encoder
		if err := t.encodePattern(&sub, op); err != nil {
			return nil, fmt.Errorf("pattern %s: %w", op.p.Name, err)
		}
		e.String(op.p.Name)
		e.String(t.patternPrint(op.p.Name))
		e.ByteSlice(sub.Bytes())
	}
	// Decisions recalled after a restore whose transactions have not come
	// again yet: a checkpoint taken meanwhile must keep them, since the
	// decisions topic is read back only from its own offset.
	recalled := slices.SortedFunc(maps.Keys(t.recall), func(a, b recallKey) int {
		return cmp.Or(cmp.Compare(a.stream, b.stream), cmp.Compare(a.id, b.id))
	})
	e.Int(len(recalled))
	for _, k := range recalled {
		e.String(k.stream)
		e.String(k.id)
		e.ByteSlice(t.recall[k])
	}
	// Pending decide: watermark events, in heap-independent order.
	pending := slices.SortedFunc(slices.Values(t.due), func(a, b *pendingDecision) int {
		return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.seq, b.seq))
	})
	e.Int(len(pending))
	for _, p := range pending {
		e.Int(p.stream)
		e.String(p.id)
		e.String(p.key)
		e.Varint(p.time)
		e.Uvarint(p.seq)
		if err := e.Value(p.fields); err != nil {
			return nil, fmt.Errorf("pending decision %s: %w", p.id, err)
		}
		e.Int(p.repeats)
	}
	e.Int(len(t.joins))
	for _, jo := range t.joins {
		var sub codec.Encoder
		if err := jo.op.Encode(&sub, encodeEvent); err != nil {
			return nil, fmt.Errorf("join %s: %w", jo.j.Name, err)
		}
		e.String(jo.j.Name)
		e.String(fmt.Sprintf("%+v", jo.j.Spec))
		e.ByteSlice(sub.Bytes())
	}
	t.encodeFeatures(e)
	t.snapshotSize = len(e.Bytes())
	return e.Bytes(), nil
}

// encodeFeatures writes the decision API's features of the ids remembered
// (Task.Features) as a last section, and only when there are any: the
// snapshots of a task that no request reached keep the layout of the builds
// before it, which do not read that section.
func (t *Task) encodeFeatures(e *codec.Encoder) {
	n := 0
	for _, s := range t.seen {
		if s != nil && len(s.features) > 0 {
			n++
		}
	}
	if n == 0 {
		return
	}
	e.Int(n)
	for i, s := range t.seen {
		if s == nil || len(s.features) == 0 {
			continue
		}
		e.Int(i)
		ids := slices.Sorted(maps.Keys(s.features))
		e.Int(len(ids))
		for _, id := range ids {
			e.String(id)
			e.ByteSlice(s.features[id])
		}
	}
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

// counters lists the Stats fields a snapshot keeps, in a fixed order.
func (s *Stats) counters() []*int64 {
	return []*int64{&s.Records, &s.DLQ, &s.Duplicates, &s.Decisions, &s.WindowResults, &s.Late,
		&s.RuleErrors, &s.HistoryOverflow, &s.Matches, &s.Joins, &s.Timeouts, &s.PartialsDropped,
		&s.Lookups, &s.LookupFallbacks}
}

func (t *Task) encodeKeys(e *codec.Encoder) error {
	keys := t.sortedKeys()
	e.Int(len(keys))
	for _, ks := range keys {
		e.String(ks.key)
		e.Varint(ks.lastTime)
		n := 0
		for i := range t.rs.Streams {
			if ks.hist(i).len() > 0 {
				n++
			}
		}
		e.Int(n)
		for i := range t.rs.Streams {
			h := ks.hist(i)
			if h.len() == 0 {
				continue
			}
			e.Int(i)
			e.Int(h.len())
			for j := range h.past {
				p := &h.past[j]
				e.Varint(p.Time)
				switch v := p.Value.(type) {
				case *stream.Row:
					e.Bool(true)
					if err := stream.EncodeRow(e, v); err != nil {
						return fmt.Errorf("history of %q: %w", ks.key, err)
					}
				default:
					e.Bool(false)
					if err := e.Value(v); err != nil {
						return fmt.Errorf("history of %q: %w", ks.key, err)
					}
				}
				m := p.Mark
				e.Uvarint(m.Set)
				e.Uvarint(m.Failed)
				if m.Errs == nil {
					e.Int(0)
				} else {
					e.Int(len(*m.Errs) + 1)
					for _, s := range *m.Errs {
						e.String(s)
					}
				}
			}
		}
	}
	return nil
}

// sortedKeys returns the task's keys in key order (the snapshot's bytes must
// not depend on the table's layout). It sorts an array of the keys' first
// eight bytes, big-endian, next to their states, and compares whole keys
// only on ties: comparing through the states read two keys from memory per
// comparison, a cache miss each on a large key set, and was a quarter of a
// snapshot's time at 100k keys.
func (t *Task) sortedKeys() []*keyState {
	type entry struct {
		prefix uint64
		ks     *keyState
	}
	entries := make([]entry, 0, t.keys.len())
	for ks := range t.keys.all() {
		var p uint64
		for i := range 8 {
			p <<= 8
			if i < len(ks.key) {
				p |= uint64(ks.key[i])
			}
		}
		entries = append(entries, entry{p, ks})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return strings.Compare(a.ks.key, b.ks.key)
	})
	keys := make([]*keyState, len(entries))
	for i, en := range entries {
		keys[i] = en.ks
	}
	return keys
}

func (t *Task) encodeSeen(e *codec.Encoder) {
	n := 0
	for _, s := range t.seen {
		if s != nil {
			n++
		}
	}
	e.Int(n)
	for i, s := range t.seen {
		if s == nil {
			continue
		}
		e.Int(i)
		n := 0
		for range s.all {
			n++
		}
		e.Int(n)
		for id, en := range s.all {
			e.String(id)
			e.String(en.key)
			e.Varint(en.time)
			e.ByteSlice(en.decision)
			e.Uvarint(uint64(en.crc))
		}
	}
}

func (t *Task) encodePattern(e *codec.Encoder, op *patternOp) error {
	e.Varint(op.dropped)
	keys := slices.Sorted(maps.Keys(op.keys))
	e.Int(len(keys))
	for _, k := range keys {
		pk := op.keys[k]
		e.String(k)
		e.Varint(pk.clock)
		e.Varint(pk.due)
		e.Int(len(pk.buf))
		for _, ev := range pk.buf {
			if err := encodeCEPEvent(e, ev); err != nil {
				return err
			}
		}
		if err := pk.state.Encode(e, encodeEvent); err != nil {
			return err
		}
	}
	return nil
}

func encodeCEPEvent(e *codec.Encoder, ev *cep.Event) error {
	e.Varint(ev.Time)
	e.Uvarint(ev.Seq)
	return encodeEvent(e, ev.Value)
}

// encodeEvent writes a *stream.Event, the value operators hold.
func encodeEvent(e *codec.Encoder, v any) error {
	ev, ok := v.(*stream.Event)
	if !ok {
		return fmt.Errorf("unexpected operator value %T", v)
	}
	e.Varint(int64(ev.Stream))
	e.Varint(int64(ev.Partition))
	e.Varint(ev.Offset)
	e.String(ev.Key)
	e.Varint(ev.Time)
	e.String(ev.ID)
	if err := e.Value(ev.Value); err != nil {
		return err
	}
	e.String(ev.Raw)
	return nil
}

func decodeEvent(d *codec.Decoder) any {
	ev := &stream.Event{Stream: int(d.Varint()), Partition: int32(d.Varint()), Offset: d.Varint(),
		Key: d.String(), Time: d.Varint(), ID: d.String()}
	v := d.Value()
	if m, ok := v.(map[string]any); ok {
		ev.Value = m
	} else if v != nil {
		d.Fail("event value is %T, not an object", v)
	}
	ev.Raw = d.String()
	return ev
}

// patternPrint identifies a pattern's definition: partial matches are only
// restored into the same NFA.
func (t *Task) patternPrint(name string) string {
	b, _ := json.Marshal(t.rs.Doc.Patterns[name])
	return string(b)
}

// windowPrint identifies a window's definition (spec and aggregate kinds;
// names may change): its state is only restored into the same definition.
func windowPrint(w *rules.Window) string {
	kinds := make([]string, len(w.Aggs))
	for i, a := range w.Aggs {
		kinds[i] = a.Kind.String()
	}
	return fmt.Sprintf("%+v %v", w.Spec, kinds)
}

// Restore loads a Snapshot into t, a task just built by NewTask that has
// processed nothing. State of operators the running ruleset no longer has,
// or has with another definition, is dropped; see Snapshot.
func (t *Task) Restore(data []byte) error {
	d := codec.NewDecoder(data)
	if v := d.Uvarint(); d.Err() == nil && v != snapshotVersion {
		return fmt.Errorf("task snapshot layout %d is not supported (this build reads %d)", v, snapshotVersion)
	}
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
	t.claimRestored()
	return nil
}

// oldStream is a stream of the ruleset a snapshot was written under.
type oldStream struct {
	name   string
	fields []string // its history fields; nil: whole maps
	now    int      // its index in the running ruleset
	ok     bool     // the running ruleset has it
}

func (t *Task) streamIndex(name string) (int, bool) {
	i := slices.IndexFunc(t.rs.Streams, func(st *rules.Stream) bool { return st.Name == name })
	return i, i >= 0
}

// sameStreams reports whether stream indexes mean the same streams in both
// rulesets, which the watermark inputs (keyed by index) need.
func sameStreams(old []oldStream, now []*rules.Stream) bool {
	return slices.EqualFunc(old, now, func(o oldStream, st *rules.Stream) bool { return o.name == st.Name })
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

// rowFields turns a stored history value back into a field map.
func rowFields(v any, names []string) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		return v
	case *stream.Row:
		m := make(map[string]any, len(names))
		for _, n := range names {
			if x, ok := v.Get(n); ok {
				m[n] = x
			}
		}
		return m
	}
	return nil
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
