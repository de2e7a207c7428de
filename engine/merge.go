package engine

import (
	"bytes"
	"fmt"

	"github.com/vigil-cep/vigil/internal/codec"
)

// MergeSnapshots merges a chain — a full snapshot or a task's first cut,
// then the deltas cut after it, in order — into one full snapshot, as the
// task would have written it at the last cut (docs/design.md
// "Checkpoints"). It reads records as bytes and needs no task or ruleset, so
// a checkpoint store's compaction and a restore share it: each key's newest
// record wins, an empty one removes the key, the ids replay their changes,
// and the globals are the last element's. Every element must have been
// written under the same layout (ruleset version and definitions).
func MergeSnapshots(chain [][]byte) ([]byte, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("merge snapshots: empty chain")
	}
	var (
		layout, globals []byte
		ids             []*idList // by stream
		keys            []keyRecord
		size            int
	)
	for i, b := range chain {
		fail := func(err error) error {
			return fmt.Errorf("merge snapshots: element %d of %d: %w", i+1, len(chain), err)
		}
		d := codec.NewDecoder(b)
		if v := d.Uvarint(); d.Err() == nil && v != layoutV2 {
			return nil, fail(fmt.Errorf("layout %d cannot be merged (only %d)", v, layoutV2))
		}
		kind := d.Uvarint()
		l, g := d.View(), d.View()
		if d.Err() != nil {
			return nil, fail(d.Err())
		}
		if kind != kindFull && kind != kindDelta {
			return nil, fail(fmt.Errorf("%w: snapshot kind %d", codec.ErrCorrupt, kind))
		}
		if i > 0 && !bytes.Equal(l, layout) {
			return nil, fail(fmt.Errorf("written under another ruleset layout than the elements before it"))
		}
		layout, globals = l, g
		if kind == kindFull {
			ids, keys = nil, nil
		}
		var err error
		if ids, err = mergeIDs(d, kind, ids); err != nil {
			return nil, fail(err)
		}
		var delta []keyRecord
		for range d.Count(2) {
			k, r := d.StringBytes(), d.View()
			if d.Err() != nil {
				break
			}
			if n := len(delta); n > 0 && bytes.Compare(delta[n-1].key, k) >= 0 {
				return nil, fail(fmt.Errorf("%w: key %q out of order", codec.ErrCorrupt, k))
			}
			delta = append(delta, keyRecord{k, r})
		}
		if err := d.Finish(); err != nil {
			return nil, fail(err)
		}
		keys = mergeKeys(keys, delta)
		size = max(size, len(b))
	}
	e := codec.NewEncoder(make([]byte, 0, size+size/8))
	e.Uvarint(layoutV2)
	e.Uvarint(kindFull)
	e.ByteSlice(layout)
	e.ByteSlice(globals)
	n := 0
	for _, l := range ids {
		if l != nil && l.live > 0 {
			n++
		}
	}
	e.Int(n)
	for s, l := range ids {
		if l == nil || l.live == 0 {
			continue
		}
		e.Int(s)
		e.Int(l.live)
		for _, it := range l.order {
			if it.live {
				e.String(it.id)
				e.ByteSlice(it.entry)
			}
		}
	}
	e.Int(len(keys))
	for _, kr := range keys {
		e.StringBytes(kr.key)
		e.ByteSlice(kr.rec)
	}
	return e.Bytes(), nil
}

// keyRecord is a key and its record, as bytes of a snapshot.
type keyRecord struct{ key, rec []byte }

// mergeKeys returns base with the records of delta (both sorted by key)
// replacing base's, and keys whose delta record is empty removed.
func mergeKeys(base, delta []keyRecord) []keyRecord {
	if len(delta) == 0 {
		return base
	}
	out := make([]keyRecord, 0, len(base)+len(delta))
	i, j := 0, 0
	for i < len(base) || j < len(delta) {
		switch {
		case j == len(delta) || (i < len(base) && bytes.Compare(base[i].key, delta[j].key) < 0):
			out = append(out, base[i])
			i++
		default:
			if i < len(base) && bytes.Equal(base[i].key, delta[j].key) {
				i++
			}
			if !bytes.Equal(delta[j].rec, emptyRecord) {
				out = append(out, delta[j])
			}
			j++
		}
	}
	return out
}

// idList is one stream's ids while a chain is merged: in arrival order,
// with an index by id.
type idList struct {
	order []idItem
	index map[string]int
	live  int
}

type idItem struct {
	id    string
	entry []byte
	live  bool
}

func (l *idList) put(id string, entry []byte) {
	if i, ok := l.index[id]; ok {
		l.order[i].entry = entry // an update (a pending decision made) keeps its place
		return
	}
	l.index[id] = len(l.order)
	l.order = append(l.order, idItem{id: id, entry: entry, live: true})
	l.live++
}

func (l *idList) remove(id string) {
	if i, ok := l.index[id]; ok {
		l.order[i].live = false
		delete(l.index, id)
		l.live--
	}
}

// mergeIDs applies the ids section of one chain element to ids.
func mergeIDs(d *codec.Decoder, kind uint64, ids []*idList) ([]*idList, error) {
	list := func(s int) *idList {
		for len(ids) <= s {
			ids = append(ids, nil)
		}
		if ids[s] == nil {
			ids[s] = &idList{index: make(map[string]int)}
		}
		return ids[s]
	}
	const maxStreams = 1 << 16
	if kind == kindFull {
		for range d.Count(2) {
			s := d.Int()
			if s >= maxStreams {
				d.Fail("ids of stream %d", s)
				break
			}
			l := list(s)
			for range d.Count(2) {
				id, entry := d.String(), d.View()
				if d.Err() != nil {
					break
				}
				l.put(id, entry)
			}
		}
		return ids, d.Err()
	}
	for range d.Count(2) {
		kind, s := d.Uvarint(), d.Int()
		if d.Err() != nil {
			break
		}
		if s >= maxStreams {
			d.Fail("ids of stream %d", s)
			break
		}
		switch kind {
		case idPut:
			id, entry := d.String(), d.View()
			if d.Err() == nil {
				list(s).put(id, entry)
			}
		case idRemove:
			list(s).remove(d.String())
		case idClear:
			*list(s) = idList{index: make(map[string]int)}
		default:
			d.Fail("id change of kind %d", kind)
		}
	}
	return ids, d.Err()
}
