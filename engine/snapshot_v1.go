package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/rules"
)

// restoreV1 reads a snapshot of layout 1 (the one builds before incremental
// checkpoints wrote: every section whole, operator by operator), after its
// version number, so that a task upgraded in place restores the checkpoint
// its previous build left. Nothing writes this layout any more.
func (t *Task) restoreV1(d *codec.Decoder) error {
	version := d.String()
	m := &layoutMap{same: version == t.rs.Version, streams: t.readStreams(d)}
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
	if sameStreams(m.streams, t.rs.Streams) {
		if err := t.wms.Decode(codec.NewDecoder(wmData)); err != nil {
			return fmt.Errorf("watermarks: %w", err)
		}
	}
	// The keys, each as layout 2's history part of a key record.
	for range d.Count(3) {
		t.decodeHistories(d, d.String(), m)
	}
	t.decodeSeen(d, m.streams)
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
	t.readRecall(d)
	pending := readPending(d)
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
	t.decodeFeatures(d, m.streams)
	if err := d.Finish(); err != nil {
		return fmt.Errorf("task snapshot: %w", err)
	}
	return t.restorePending(pending, m)
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

// decodePattern reads a pattern's state: its dropped count, then each key
// as layout 2's record of the key in the pattern.
func (t *Task) decodePattern(d *codec.Decoder, op *patternOp) error {
	op.dropped = d.Varint()
	for range d.Count(4) {
		if err := t.decodePatternKey(d, op, d.String()); err != nil {
			return err
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
				s.features[s.id(s.index(s.table[slot]))] = b
			}
		}
	}
}
