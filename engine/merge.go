package engine

import (
	"bytes"
	"fmt"
	"slices"

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
	m, err := mergeChain(chain)
	if err != nil {
		return nil, err
	}
	return m.encode(), nil
}

// merged is a chain merged, as views into its elements' bytes: what a full
// snapshot holds, ready to be encoded (MergeSnapshots) or restored
// (Task.restoreMerged) without being encoded and read again. The ids stay
// as the base's section and the deltas' changes, in chain order: an
// encoding applies the changes to lists of the base's ids
// (applyIDChanges); a restore plays them on the task's id tables
// (idReplay), reading each id from the bytes, and builds no list of the
// hundreds of thousands of ids a task holds.
type merged struct {
	layout, globals []byte
	ids             []byte   // the base's ids section (eachFullID)
	idChanges       [][]byte // each delta's ids section (eachIDChange)
	idPuts          []int    // per stream, the base's ids and the deltas' puts: what a table will hold at most
	keys            []keyRecord
	size            int // of the largest element, to size the encoding
}

// idItem is an id and its entry (layoutV2).
type idItem struct {
	id    []byte
	entry []byte
}

// keyRecord is a key and its record.
type keyRecord struct{ key, rec []byte }

// idChangeView is one change of a delta's ids section.
type idChangeView struct {
	kind   uint64
	stream int
	id     []byte
	entry  []byte
}

// maxStreams bounds the stream indexes a snapshot may name (a corrupt one
// could otherwise make the merge allocate for a huge index).
const maxStreams = 1 << 16

func mergeChain(chain [][]byte) (*merged, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("merge snapshots: empty chain")
	}
	m := &merged{}
	var delta []keyRecord // every delta's keys, in chain order
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
		if i > 0 && !bytes.Equal(l, m.layout) {
			return nil, fail(fmt.Errorf("written under another ruleset layout than the elements before it"))
		}
		if i > 0 && kind == kindFull {
			return nil, fail(fmt.Errorf("a full snapshot after the first element"))
		}
		m.layout, m.globals = l, g
		m.size = max(m.size, len(b))
		ids := d.Remaining()
		if kind == kindFull {
			eachFullID(d, func(s int, _, _ []byte) { m.countPut(s) })
			m.ids = ids[:len(ids)-d.Len()]
		} else {
			eachIDChange(d, func(ch idChangeView) {
				if ch.kind == idPut {
					m.countPut(ch.stream)
				}
			})
			m.idChanges = append(m.idChanges, ids[:len(ids)-d.Len()])
		}
		keys := readKeys(d)
		if err := d.Finish(); err != nil {
			return nil, fail(err)
		}
		if kind == kindFull {
			m.keys = keys
		} else {
			delta = append(delta, keys...)
		}
	}
	m.keys = mergeKeys(m.keys, newestRecords(delta))
	return m, nil
}

// countPut counts an id put in stream s (merged.idPuts).
func (m *merged) countPut(s int) {
	for len(m.idPuts) <= s {
		m.idPuts = append(m.idPuts, 0)
	}
	m.idPuts[s]++
}

// readKeys reads a keys section, checking the order.
func readKeys(d *codec.Decoder) []keyRecord {
	n := d.Count(2)
	keys := make([]keyRecord, 0, min(n, d.Len()/2))
	for range n {
		k, r := d.StringBytes(), d.View()
		if d.Err() != nil {
			break
		}
		if n := len(keys); n > 0 && bytes.Compare(keys[n-1].key, k) >= 0 {
			d.Fail("key %q out of order", k)
			break
		}
		keys = append(keys, keyRecord{k, r})
	}
	return keys
}

// newestRecords returns the newest record of each key of the deltas' keys
// in chain order (each delta's sorted), sorted by key: a stable sort keeps
// chain order among a key's records, and the last one wins. One sort of
// what the deltas hold, rather than a merge with a copy per delta.
func newestRecords(keys []keyRecord) []keyRecord {
	slices.SortStableFunc(keys, func(a, b keyRecord) int { return bytes.Compare(a.key, b.key) })
	out := keys[:0]
	for i, kr := range keys {
		if i+1 < len(keys) && bytes.Equal(keys[i+1].key, kr.key) {
			continue
		}
		out = append(out, kr)
	}
	return out
}

// mergeKeys returns base with the records of delta (both sorted by key,
// unique) replacing base's; keys whose delta record is empty are removed.
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

// eachFullID calls f with every id of a full snapshot's ids section, read
// from d, in the order listed: per stream, in arrival order.
func eachFullID(d *codec.Decoder, f func(stream int, id, entry []byte)) {
	for range d.Count(2) {
		s := d.Int()
		if s >= maxStreams {
			d.Fail("ids of stream %d", s)
			break
		}
		for range d.Count(2) {
			id, entry := d.StringBytes(), d.View()
			if d.Err() != nil {
				break
			}
			f(s, id, entry)
		}
	}
}

// eachIDChange calls f with every change of a delta's ids section, read
// from d, in order.
func eachIDChange(d *codec.Decoder, f func(idChangeView)) {
	for range d.Count(2) {
		ch := idChangeView{kind: d.Uvarint(), stream: d.Int()}
		if d.Err() != nil {
			break
		}
		if ch.stream >= maxStreams {
			d.Fail("ids of stream %d", ch.stream)
			break
		}
		switch ch.kind {
		case idPut:
			ch.id, ch.entry = d.StringBytes(), d.View()
		case idRemove:
			ch.id = d.StringBytes()
		case idClear:
		default:
			d.Fail("id change of kind %d", ch.kind)
		}
		if d.Err() != nil {
			break
		}
		f(ch)
	}
}

// listIDs lists the ids of a merged chain, its changes applied, per stream.
func (m *merged) listIDs() [][]idItem {
	var base [][]idItem
	eachFullID(codec.NewDecoder(m.ids), func(s int, id, entry []byte) {
		for len(base) <= s {
			base = append(base, nil)
		}
		base[s] = append(base[s], idItem{id, entry})
	})
	var changes []idChangeView
	for _, section := range m.idChanges {
		eachIDChange(codec.NewDecoder(section), func(ch idChangeView) { changes = append(changes, ch) })
	}
	return applyIDChanges(base, changes)
}

// applyIDChanges plays the deltas' changes onto the base's ids, for an
// encoding of the merge; a restore plays them on its tables instead
// (idReplay), with the same outcome. The base
// holds every id of the task (hundreds of thousands) and the changes a few
// percent of them, so only the ids the changes name are indexed: an id put
// that the base holds, and still holds, keeps its place (a pending decision
// made); any other put goes to the end, in the order of the changes.
func applyIDChanges(base [][]idItem, changes []idChangeView) [][]idItem {
	if len(changes) == 0 {
		return base
	}
	const (
		absent = iota
		inBase
		appended
	)
	type idState struct {
		where int
		entry []byte
		seq   int // the append that placed it, when appended
	}
	streams := len(base)
	for _, ch := range changes {
		streams = max(streams, ch.stream+1)
	}
	// Per stream, so that a lookup by m[string(id)] does not allocate.
	states := make([]map[string]*idState, streams)
	for _, ch := range changes {
		if ch.kind == idClear {
			continue
		}
		if states[ch.stream] == nil {
			states[ch.stream] = make(map[string]*idState)
		}
		if states[ch.stream][string(ch.id)] == nil {
			states[ch.stream][string(ch.id)] = &idState{}
		}
	}
	// named[s][i]: the changes name base id i of stream s, so that the
	// output below looks up only those.
	named := make([][]bool, len(base))
	for s, items := range base {
		if st := states[s]; len(st) > 0 {
			named[s] = make([]bool, len(items))
			for i, it := range items {
				if x := st[string(it.id)]; x != nil {
					x.where, x.entry = inBase, it.entry
					named[s][i] = true
				}
			}
		}
	}
	type appendedID struct {
		id  []byte
		st  *idState
		seq int
	}
	baseCleared := make([]bool, streams)
	added := make([][]appendedID, streams)
	seq := 0
	for _, ch := range changes {
		switch ch.kind {
		case idPut:
			st := states[ch.stream][string(ch.id)]
			if st.where == absent {
				seq++
				st.where, st.seq = appended, seq
				added[ch.stream] = append(added[ch.stream], appendedID{ch.id, st, seq})
			}
			st.entry = ch.entry
		case idRemove:
			states[ch.stream][string(ch.id)].where = absent
		case idClear:
			baseCleared[ch.stream] = true
			added[ch.stream] = nil
			for _, st := range states[ch.stream] {
				st.where = absent
			}
		}
	}
	out := make([][]idItem, streams)
	for s := range streams {
		var items []idItem
		if s < len(base) && !baseCleared[s] {
			items = make([]idItem, 0, len(base[s])+len(added[s]))
			for i, it := range base[s] {
				if named[s] != nil && named[s][i] {
					st := states[s][string(it.id)]
					if st.where != inBase {
						continue
					}
					it.entry = st.entry
				}
				items = append(items, it)
			}
		}
		for _, a := range added[s] {
			if a.st.where == appended && a.st.seq == a.seq {
				items = append(items, idItem{a.id, a.st.entry})
			}
		}
		out[s] = items
	}
	return out
}

// encode writes m as a full snapshot.
func (m *merged) encode() []byte {
	e := codec.NewEncoder(make([]byte, 0, m.size+m.size/8))
	e.Uvarint(layoutV2)
	e.Uvarint(kindFull)
	e.ByteSlice(m.layout)
	e.ByteSlice(m.globals)
	ids := m.listIDs()
	n := 0
	for _, items := range ids {
		if len(items) > 0 {
			n++
		}
	}
	e.Int(n)
	for s, items := range ids {
		if len(items) == 0 {
			continue
		}
		e.Int(s)
		e.Int(len(items))
		for _, it := range items {
			e.StringBytes(it.id)
			e.ByteSlice(it.entry)
		}
	}
	e.Int(len(m.keys))
	for _, kr := range m.keys {
		e.StringBytes(kr.key)
		e.ByteSlice(kr.rec)
	}
	return e.Bytes()
}
