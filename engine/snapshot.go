package engine

import (
	"bytes"
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/vigil-cep/vigil/cep"
	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/stream"
)

// A task snapshot (docs/design.md "Checkpoints") is written key by key: all
// the state of one key — its history, and its state in every window,
// pattern and join — is one record, so that a checkpoint can hold only the
// keys that changed since the previous one (a delta, Task.Cut) and a chain of
// them can be merged into one full snapshot (MergeSnapshots) without a task.
//
// Layout 2, in the notation of package state (u = Uvarint, s = Varint):
//
//	version  u  2
//	kind     u  0 full, 1 delta
//	layout   bytes: what the state was written under — the ruleset version,
//	         its streams and history fields, the names and definitions of its
//	         windows, patterns and joins; equal in every element of a chain
//	globals  bytes: watermarks, counters, sequence numbers, each operator's
//	         own state (its watermark, dropped partial matches), decisions
//	         recalled and decisions waiting for the watermark
//	ids      full: u streams, then per stream: u index, u count, count × (id
//	         string, entry bytes), in arrival order; delta: u count of
//	         changes in the order they happened, each u kind (0 put, 1
//	         remove, 2 clear), u stream, then put: id string, entry bytes;
//	         remove: id string
//	keys     u count, then per key in increasing byte order: key string,
//	         record bytes; a delta's empty record (emptyRecord) says the key
//	         holds nothing any more
//
// An id's entry is: key string, time s, decision bytes, body crc u, features
// bytes. A key's record: bool engine state, then (if set) last event time s
// and u streams × (u index, u count, count × history entry as in layout 1);
// then for windows, patterns and joins in turn: u count, count × (u operator
// index, bytes of the key's state there).
//
// Layout 1, every section whole, is still read (restoreV1) so that a task
// upgraded in place restores the checkpoint its previous build left; the
// next checkpoint after it is then a full one (NeedsBase).
const (
	layoutV1 = 1
	layoutV2 = 2
)

// Snapshot kinds (layout 2).
const (
	kindFull  = 0
	kindDelta = 1
)

// Changes to the ids, in a delta.
const (
	idPut    = 0
	idRemove = 1
	idClear  = 2
)

// emptyRecord is the record of a key without state: no engine state and no
// operator state (four zero bytes).
var emptyRecord = []byte{0, 0, 0, 0}

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
//
// Snapshot runs on the task's goroutine for as long as the whole state
// takes to encode; a live task checkpoints with Cut instead, which writes
// only what changed and holds the task for no longer than it chooses.
func (t *Task) Snapshot() ([]byte, error) {
	t.Drain(0) // the state as if every advance had fired at once
	// Room for the previous snapshot and an eighth more: growing the
	// buffer by doubling copied and cleared about twice the snapshot's
	// size, and the garbage made the collector run during the encode.
	e := codec.NewEncoder(make([]byte, 0, max(1<<16, t.snapshotSize+t.snapshotSize/8)))
	e.Uvarint(layoutV2)
	e.Uvarint(kindFull)
	if err := t.encodeHead(e); err != nil {
		return nil, err
	}
	t.encodeIDs(e)
	keys := t.allKeys()
	e.Int(len(keys))
	var rec codec.Encoder
	for _, key := range keys {
		rec = *codec.NewEncoder(rec.Bytes()[:0])
		if err := t.encodeKeyRecord(&rec, key); err != nil {
			return nil, err
		}
		e.String(key)
		e.ByteSlice(rec.Bytes())
	}
	t.snapshotSize = len(e.Bytes())
	return e.Bytes(), nil
}

// encodeHead writes the layout and globals sections.
func (t *Task) encodeHead(e *codec.Encoder) error {
	e.ByteSlice(t.layout())
	var sub codec.Encoder
	if err := t.encodeGlobals(&sub); err != nil {
		return err
	}
	e.ByteSlice(sub.Bytes())
	return nil
}

// encodeLayout writes what the state is written under (see layoutV2).
func (t *Task) encodeLayout(e *codec.Encoder) {
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
	e.Int(len(t.windows))
	for _, w := range t.rs.Windows {
		e.String(w.Name)
		e.String(windowPrint(w))
	}
	e.Int(len(t.patterns))
	for _, op := range t.patterns {
		e.String(op.p.Name)
		e.String(t.patternPrint(op.p.Name))
	}
	e.Int(len(t.joins))
	for _, jo := range t.joins {
		e.String(jo.j.Name)
		e.String(fmt.Sprintf("%+v", jo.j.Spec))
	}
}

// encodeGlobals writes what the task holds beyond its keys and ids.
func (t *Task) encodeGlobals(e *codec.Encoder) error {
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
	var sub codec.Encoder
	t.wms.Encode(&sub)
	e.ByteSlice(sub.Bytes())
	for _, op := range t.windows {
		sub = codec.Encoder{}
		op.EncodeHeader(&sub)
		e.ByteSlice(sub.Bytes())
	}
	for _, op := range t.patterns {
		e.Varint(op.dropped)
	}
	for _, jo := range t.joins {
		sub = codec.Encoder{}
		jo.op.EncodeHeader(&sub)
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
			return fmt.Errorf("pending decision %s: %w", p.id, err)
		}
		e.Int(p.repeats)
	}
	return nil
}

// encodeIDs writes every stream's remembered ids in full, in arrival order.
func (t *Task) encodeIDs(e *codec.Encoder) {
	n := 0
	for _, s := range t.seen {
		if s != nil && s.len() > 0 {
			n++
		}
	}
	e.Int(n)
	var sub codec.Encoder
	for i, s := range t.seen {
		if s == nil || s.len() == 0 {
			continue
		}
		e.Int(i)
		n := 0
		for range s.all {
			n++ // all may yield an id twice, after a restore put it twice
		}
		e.Int(n)
		for id, en := range s.all {
			sub = *codec.NewEncoder(sub.Bytes()[:0])
			encodeIDEntry(&sub, en, s.features[id])
			e.String(id)
			e.ByteSlice(sub.Bytes())
		}
	}
}

// encodeIDEntry writes what is kept of an id (its entry in layout 2).
func encodeIDEntry(e *codec.Encoder, en seen, features []byte) {
	e.String(en.key)
	e.Varint(en.time)
	e.ByteSlice(en.decision)
	e.Uvarint(uint64(en.crc))
	e.ByteSlice(features)
}

// allKeys returns every key the task holds state for — in its own table or
// in any operator — in increasing byte order.
func (t *Task) allKeys() []string {
	keys := make([]string, 0, t.keys.len()+t.cold.len())
	for ks := range t.keys.all() {
		keys = append(keys, ks.key)
	}
	for i := range t.cold.len() { // in no operator either
		keys = append(keys, bytesView(t.cold.key(i))) // a frozen key's bytes never change
	}
	// A key can outlive its history in an operator (a window kept for its
	// allowed lateness after the sweep forgot the key).
	extra := make(map[string]struct{})
	add := func(key string) {
		if t.keys.get(key, keyHash(key)) == nil {
			extra[key] = struct{}{}
		}
	}
	for _, op := range t.windows {
		for key := range op.Keys {
			add(key)
		}
	}
	for _, op := range t.patterns {
		for key := range op.keys {
			add(key)
		}
	}
	for _, jo := range t.joins {
		for key := range jo.op.Keys {
			add(key)
		}
	}
	keys = slices.AppendSeq(keys, maps.Keys(extra))
	sortKeys(keys)
	return keys
}

// sortKeys sorts keys in increasing byte order. It sorts an array of the
// keys' first eight bytes, big-endian, next to the keys, and compares whole
// keys only on ties: comparing the strings read each key's bytes from memory,
// a cache miss each on a large key set (a quarter of a snapshot's time at
// 100k keys).
func sortKeys(keys []string) {
	type entry struct {
		prefix uint64
		key    string
	}
	entries := make([]entry, len(keys))
	for i, k := range keys {
		var p uint64
		for j := range 8 {
			p <<= 8
			if j < len(k) {
				p |= uint64(k[j])
			}
		}
		entries[i] = entry{p, k}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	for i, en := range entries {
		keys[i] = en.key
	}
}

// encodeKeyRecord writes key's record: its state in the task and in every
// operator (see layoutV2); emptyRecord when it has none.
func (t *Task) encodeKeyRecord(e *codec.Encoder, key string) error {
	h := keyHash(key)
	if t.cold.len() > 0 {
		if i := t.cold.find(key, h); i >= 0 {
			e.Raw(t.cold.rec(i)) // written by this function when it froze
			return nil
		}
	}
	ks := t.keys.get(key, h)
	e.Bool(ks != nil)
	if ks != nil {
		t.encodeHistories(e, ks)
	}
	// Each operator is asked once for the key (at 1M keys every lookup
	// misses the caches): the indexes of those holding it first, as the
	// count goes before the states.
	var buf [8]int
	var sub codec.Encoder
	present := buf[:0]
	for i, op := range t.windows {
		if op.HasKey(key) {
			present = append(present, i)
		}
	}
	e.Int(len(present))
	for _, i := range present {
		sub = *codec.NewEncoder(sub.Bytes()[:0])
		if err := t.windows[i].EncodeKey(&sub, key); err != nil {
			return fmt.Errorf("window %s: %w", t.rs.Windows[i].Name, err)
		}
		e.Int(i)
		e.ByteSlice(sub.Bytes())
	}
	var pks [8]*patternKey
	held := pks[:0]
	present = buf[:0]
	for i, op := range t.patterns {
		if pk := op.keys[key]; pk != nil {
			present, held = append(present, i), append(held, pk)
		}
	}
	e.Int(len(present))
	for j, i := range present {
		sub = *codec.NewEncoder(sub.Bytes()[:0])
		if err := encodePatternKey(&sub, held[j]); err != nil {
			return fmt.Errorf("pattern %s: %w", t.patterns[i].p.Name, err)
		}
		e.Int(i)
		e.ByteSlice(sub.Bytes())
	}
	present = buf[:0]
	for i, jo := range t.joins {
		if jo.op.HasKey(key) {
			present = append(present, i)
		}
	}
	e.Int(len(present))
	for _, i := range present {
		sub = *codec.NewEncoder(sub.Bytes()[:0])
		if err := t.joins[i].op.EncodeKey(&sub, key, encodeEvent); err != nil {
			return fmt.Errorf("join %s: %w", t.joins[i].j.Name, err)
		}
		e.Int(i)
		e.ByteSlice(sub.Bytes())
	}
	return nil
}

// encodeHistories writes a key's last event time and its histories.
func (t *Task) encodeHistories(e *codec.Encoder, ks *keyState) {
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
		e.Raw(h.enc()) // its entries, as history keeps them
	}
}

// encodePatternKey writes one key's state in a pattern.
func encodePatternKey(e *codec.Encoder, pk *patternKey) error {
	e.Varint(pk.clock)
	e.Varint(pk.due)
	e.Int(len(pk.buf))
	for _, ev := range pk.buf {
		if err := encodeCEPEvent(e, ev); err != nil {
			return err
		}
	}
	return pk.state.Encode(e, encodeEvent)
}

// Restore loads a full snapshot (Snapshot, or MergeSnapshots of a chain)
// into t, a task just built by NewTask that has processed nothing. State of
// operators the running ruleset no longer has, or has with another
// definition, is dropped; see Snapshot. A chain of deltas goes through
// RestoreChain.
func (t *Task) Restore(data []byte) error {
	d := codec.NewDecoder(data)
	v := d.Uvarint()
	if d.Err() != nil {
		return fmt.Errorf("task snapshot: %w", d.Err())
	}
	switch v {
	case layoutV1:
		return t.restoring(func() error {
			t.needBase = true // deltas are written in layout 2 only
			return t.restoreV1(d)
		})
	case layoutV2:
		if k := d.Uvarint(); d.Err() == nil && k != kindFull {
			return errors.New("task snapshot: a delta alone cannot be restored (RestoreChain merges it onto its base)")
		}
		return t.RestoreChain([][]byte{data})
	default:
		return fmt.Errorf("task snapshot layout %d is not supported (this build reads %d and %d)", v, layoutV1, layoutV2)
	}
}

// RestoreChain restores a chain of snapshots — a full one, or a first
// Cut, followed by the deltas cut after it, in order — as Restore does
// their merge (MergeSnapshots), without encoding the merge and reading it
// again. A chain of one snapshot in layout 1 restores as Restore does.
func (t *Task) RestoreChain(chain [][]byte) error {
	if len(chain) == 1 {
		if d := codec.NewDecoder(chain[0]); d.Uvarint() == layoutV1 {
			return t.Restore(chain[0])
		}
	}
	m, err := mergeChain(chain)
	if err != nil {
		return fmt.Errorf("task snapshot: %w", err)
	}
	return t.restoring(func() error { return t.restoreMerged(m) })
}

// restoring runs restore on t, a task just built by NewTask: the keys it
// makes are no change for the next checkpoint (the state is its chain's),
// and the ids it holds are claimed in the shared IDIndex once it succeeds.
func (t *Task) restoring(restore func() error) error {
	track := t.track
	t.track = false
	defer func() { t.track = track; t.resetTracking() }()
	if err := restore(); err != nil {
		return err
	}
	t.claimRestored()
	return nil
}

// NeedsBase reports whether the task's next checkpoint must be a full one
// (Snapshot) rather than a delta: the state it restored was written under
// another ruleset version or layout, so a delta on it would not merge.
func (t *Task) NeedsBase() bool { return t.needBase }

// restoreMerged loads a merged chain.
func (t *Task) restoreMerged(mg *merged) error {
	sameLayout := bytes.Equal(mg.layout, t.layout())
	if !sameLayout {
		t.needBase = true
	}
	m, err := t.readLayout(mg.layout)
	if err != nil {
		return err
	}
	pending, err := t.readGlobals(mg.globals, m)
	if err != nil {
		return err
	}
	if err := t.restoreIDs(mg, m); err != nil {
		return err
	}
	if sameLayout {
		// Written by this layout: every key restores frozen, as its record
		// (cold.go), and thaws when used; a restore then reads and indexes
		// the records, and builds no key's state.
		t.coldLayout = m
		t.cold.reserve(len(mg.keys))
		var hot []keyRecord
		for _, kr := range mg.keys {
			if wake, eager, ok := t.recordWake(kr.rec, m); ok {
				t.cold.put(bytesView(kr.key), maphash.Bytes(keySeed, kr.key), kr.rec, wake, eager, false)
			} else {
				hot = append(hot, kr) // decoded below: it has join state, or is corrupt
			}
		}
		mg.keys = hot
	}
	t.keys.reserve(len(mg.keys))
	for _, op := range t.windows {
		op.Reserve(len(mg.keys)) // the keys with state in it are among these
	}
	for i, kr := range mg.keys {
		if next := i + 2; next < len(mg.keys) {
			// The tables are large and their slots are visited at random:
			// start loading those a later key goes to while this one decodes.
			t.keys.prefetchSlot(maphash.Bytes(keySeed, mg.keys[next].key))
			for _, op := range t.windows {
				op.PrefetchKey(bytesView(mg.keys[next].key))
			}
		}
		if err := t.decodeKeyRecord(string(kr.key), kr.rec, m, stream.MaxTime); err != nil {
			return fmt.Errorf("task snapshot: key %q: %w", kr.key, err)
		}
	}
	return t.restorePending(pending, m)
}

// layout returns the task's layout section, encoded once: it prints the
// definitions of the patterns and windows, a tenth of a millisecond that a
// cut would otherwise spend each time.
func (t *Task) layout() []byte {
	if t.layoutBytes == nil {
		var e codec.Encoder
		t.encodeLayout(&e)
		t.layoutBytes = e.Bytes()
	}
	return t.layoutBytes
}

// layoutMap says where what a snapshot was written under goes in the
// running ruleset.
type layoutMap struct {
	same     bool // the same ruleset version
	streams  []oldStream
	windows  []int // the snapshot's window i is the running window windows[i], or -1
	patterns []int
	joins    []int
}

func (t *Task) readLayout(b []byte) (*layoutMap, error) {
	d := codec.NewDecoder(b)
	m := &layoutMap{same: d.String() == t.rs.Version, streams: t.readStreams(d)}
	ops := func(find func(name, print string) int) []int {
		idx := make([]int, d.Count(2))
		for i := range idx {
			name, print := d.String(), d.String()
			idx[i] = find(name, print)
		}
		return idx
	}
	m.windows = ops(func(name, print string) int {
		i := slices.IndexFunc(t.rs.Windows, func(w *rules.Window) bool { return w.Name == name })
		if i >= 0 && print != windowPrint(t.rs.Windows[i]) {
			i = -1
		}
		return i
	})
	m.patterns = ops(func(name, print string) int {
		i := slices.IndexFunc(t.patterns, func(op *patternOp) bool { return op.p.Name == name })
		if i >= 0 && print != t.patternPrint(name) {
			i = -1
		}
		return i
	})
	m.joins = ops(func(name, print string) int {
		i := slices.IndexFunc(t.joins, func(jo *joinOp) bool { return jo.j.Name == name })
		if i >= 0 && print != fmt.Sprintf("%+v", t.joins[i].j.Spec) {
			i = -1
		}
		return i
	})
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("task snapshot layout: %w", err)
	}
	return m, nil
}

// readStreams reads the streams a snapshot was written under (both
// layouts), with where each is in the running ruleset.
func (t *Task) readStreams(d *codec.Decoder) []oldStream {
	streams := make([]oldStream, d.Count(2))
	for i := range streams {
		o := &streams[i]
		o.name = d.String()
		o.fields = make([]string, d.Count(1))
		for j := range o.fields {
			o.fields[j] = d.String()
		}
		if d.Bool() {
			o.fields = nil
		}
		o.now, o.ok = t.streamIndex(o.name)
	}
	return streams
}

// readRecall reads the decisions recalled (both layouts) into the task.
func (t *Task) readRecall(d *codec.Decoder) {
	for range d.Count(3) {
		k, b := recallKey{d.String(), d.String()}, d.ByteSlice()
		if d.Err() == nil {
			if t.recall == nil {
				t.recall = make(map[recallKey][]byte)
			}
			t.recall[k] = b
		}
	}
}

// readPending reads the decisions waiting for the watermark (both
// layouts), for restorePending once the ids they link to are restored.
func readPending(d *codec.Decoder) []*pendingDecision {
	var pending []*pendingDecision
	for range d.Count(6) {
		p := &pendingDecision{stream: d.Int(), id: d.String(), key: d.String(), time: d.Varint(), seq: d.Uvarint()}
		p.fields, _ = d.Value().(map[string]any)
		p.repeats = d.Int()
		if d.Err() != nil {
			break
		}
		pending = append(pending, p)
	}
	return pending
}

// readGlobals restores the globals section; it returns the pending
// decisions, which are restored after the ids they link to.
func (t *Task) readGlobals(b []byte, m *layoutMap) ([]*pendingDecision, error) {
	d := codec.NewDecoder(b)
	t.wm = d.Varint()
	t.lastSweep = d.Varint()
	t.seq = d.Uvarint()
	if vt := d.Varint(); t.vt != nil {
		t.vt.now = vt
	}
	for _, n := range t.stats.counters() {
		*n = d.Varint()
	}
	wmData := d.View()
	if d.Err() == nil && sameStreams(m.streams, t.rs.Streams) {
		if err := t.wms.Decode(codec.NewDecoder(wmData)); err != nil {
			return nil, fmt.Errorf("watermarks: %w", err)
		}
	}
	for i, now := range m.windows {
		sub := d.View()
		if now >= 0 && d.Err() == nil {
			wd := codec.NewDecoder(sub)
			if err := t.windows[now].DecodeHeader(wd); err != nil || wd.Finish() != nil {
				return nil, fmt.Errorf("window %d: %w", i, cmp.Or(err, wd.Err()))
			}
		}
	}
	for _, now := range m.patterns {
		dropped := d.Varint()
		if now >= 0 {
			t.patterns[now].dropped = dropped
		}
	}
	for i, now := range m.joins {
		sub := d.View()
		if now >= 0 && d.Err() == nil {
			jd := codec.NewDecoder(sub)
			if err := t.joins[now].op.DecodeHeader(jd); err != nil || jd.Finish() != nil {
				return nil, fmt.Errorf("join %d: %w", i, cmp.Or(err, jd.Err()))
			}
		}
	}
	t.readRecall(d)
	pending := readPending(d)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("task snapshot globals: %w", err)
	}
	return pending, nil
}

// restorePending queues the pending decisions the running version still
// makes, linking each to its id's entry.
func (t *Task) restorePending(pending []*pendingDecision, m *layoutMap) error {
	for _, p := range pending {
		if p.stream >= len(m.streams) {
			return fmt.Errorf("task snapshot: pending decision of stream %d of %d", p.stream, len(m.streams))
		}
		o := m.streams[p.stream]
		if !o.ok || t.rs.Streams[o.now].Decide == rules.DecideNever {
			continue // the running version no longer decides that stream
		}
		p.stream = o.now
		heap.Push(&t.due, p)
		if s := t.seen[p.stream]; s != nil {
			s.setPending(p.id, p)
		}
	}
	return nil
}

// restoreIDs puts the ids of a merged chain: the base's, then the deltas'
// changes played on the tables (idReplay). Ids of streams the running
// version does not remember are dropped.
func (t *Task) restoreIDs(mg *merged, m *layoutMap) error {
	r := idRestore{t: t, m: m}
	r.reserve(mg)
	if r.err == nil {
		r.putBase(mg.ids)
	}
	if r.err == nil {
		r.replay(mg.idChanges)
	}
	return r.err
}

// idRestore is one restoreIDs: the sections are read through callbacks
// (eachFullID, eachIDChange), which record the first error in err.
type idRestore struct {
	t   *Task
	m   *layoutMap
	err error
}

// table is the running task's table of the snapshot's stream si, or nil.
func (r *idRestore) table(si int) *seenIDs {
	if si >= len(r.m.streams) {
		r.err = cmp.Or(r.err, fmt.Errorf("task snapshot: ids of stream %d of %d", si, len(r.m.streams)))
		return nil
	}
	if o := r.m.streams[si]; o.ok {
		return r.t.seen[o.now]
	}
	return nil
}

// reserve sizes each table for the base's ids and the deltas' puts, as
// mergeChain counted them (it read the sections whole: they hold no error
// of form).
func (r *idRestore) reserve(mg *merged) {
	for si, n := range mg.idPuts {
		if n == 0 {
			continue
		}
		if s := r.table(si); s != nil {
			s.reserve(n)
		}
	}
}

// putBase puts the base's ids, by batches: the slots of a batch's ids
// start loading before the first of them is put (the tables are large,
// and visited at random).
func (r *idRestore) putBase(section []byte) {
	type decoded struct {
		s        *seenIDs
		id       string
		en       seen
		features []byte
	}
	var batch []decoded
	put := func() {
		for _, b := range batch {
			b.s.setFeatures(b.s.put(b.id, b.en), b.features)
		}
		batch = batch[:0]
	}
	eachFullID(codec.NewDecoder(section), func(si int, id, entry []byte) {
		s := r.table(si)
		if s == nil || r.err != nil {
			return
		}
		idv, en, features, err := decodeIDEntry(id, entry)
		if err != nil {
			r.err = err
			return
		}
		s.prefetchSlot(idv)
		if batch = append(batch, decoded{s, idv, en, features}); len(batch) == 16 {
			put()
		}
	})
	put()
}

// replay plays the deltas' changes, in chain order, on the tables.
func (r *idRestore) replay(sections [][]byte) {
	replays := make(map[*seenIDs]*idReplay)
	for _, section := range sections {
		eachIDChange(codec.NewDecoder(section), func(ch idChangeView) {
			s := r.table(ch.stream)
			if s == nil || r.err != nil {
				return
			}
			rp := replays[s]
			if rp == nil {
				rp = newIDReplay(s)
				replays[s] = rp
			}
			switch ch.kind {
			case idPut:
				id, en, features, err := decodeIDEntry(ch.id, ch.entry)
				if err != nil {
					r.err = err
					return
				}
				rp.put(id, en, features)
			case idRemove:
				rp.forget(bytesView(ch.id))
			case idClear:
				rp.clear()
			}
		})
	}
	for _, rp := range replays {
		rp.done()
	}
}

// decodeIDEntry decodes an id's entry (layout 2) and its features, as views
// of id and entry for a seenIDs to copy (put, setFeatures): a restore
// allocates nothing per id beyond what the table keeps.
func decodeIDEntry(id, entry []byte) (string, seen, []byte, error) {
	ed := codec.NewDecoder(entry)
	en := seen{key: bytesView(ed.StringBytes()), time: ed.Varint(), decision: ed.View(), crc: uint32(ed.Uvarint())}
	features := ed.View()
	if err := ed.Finish(); err != nil {
		return "", seen{}, nil, fmt.Errorf("task snapshot: id %q: %w", id, err)
	}
	return bytesView(id), en, features, nil
}

// bytesView returns b as a string that aliases it, for a caller that copies
// or drops the string before b changes.
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// decodeKeyRecord restores one key's record, written at watermark at (its
// windows due since then are overdue: window.Operator.DecodeKeyAt), or
// stream.MaxTime for the watermark now. The key's state in every operator
// keeps key, one string.
func (t *Task) decodeKeyRecord(key string, rec []byte, m *layoutMap, at int64) error {
	d := codec.NewDecoder(rec)
	if d.Bool() {
		t.decodeHistories(d, key, m)
	}
	for range d.Count(2) {
		i, sub := d.Int(), d.View()
		if d.Err() != nil {
			break
		}
		if i >= len(m.windows) {
			return fmt.Errorf("window %d of %d", i, len(m.windows))
		}
		if now := m.windows[i]; now >= 0 {
			wd := codec.NewDecoder(sub)
			if err := t.windows[now].DecodeKeyAt(wd, key, at); err != nil || wd.Finish() != nil {
				return fmt.Errorf("window %s: %w", t.rs.Windows[now].Name, cmp.Or(err, wd.Err()))
			}
		}
	}
	for range d.Count(2) {
		i, sub := d.Int(), d.View()
		if d.Err() != nil {
			break
		}
		if i >= len(m.patterns) {
			return fmt.Errorf("pattern %d of %d", i, len(m.patterns))
		}
		if now := m.patterns[i]; now >= 0 {
			pd := codec.NewDecoder(sub)
			if err := t.decodePatternKey(pd, t.patterns[now], key); err != nil || pd.Finish() != nil {
				return fmt.Errorf("pattern %s: %w", t.patterns[now].p.Name, cmp.Or(err, pd.Err()))
			}
		}
	}
	for range d.Count(2) {
		i, sub := d.Int(), d.View()
		if d.Err() != nil {
			break
		}
		if i >= len(m.joins) {
			return fmt.Errorf("join %d of %d", i, len(m.joins))
		}
		if now := m.joins[i]; now >= 0 {
			jd := codec.NewDecoder(sub)
			if err := t.joins[now].op.DecodeKey(jd, key, decodeEvent); err != nil || jd.Finish() != nil {
				return fmt.Errorf("join %s: %w", t.joins[now].j.Name, cmp.Or(err, jd.Err()))
			}
		}
	}
	return d.Finish()
}

// decodeHistories reads what encodeHistories wrote (both layouts),
// re-projecting history written under another ruleset version.
func (t *Task) decodeHistories(d *codec.Decoder, key string, m *layoutMap) {
	lastTime := d.Varint()
	ks := t.ownKeyState(key, keyHash(key))
	t.idle.touch(ks, lastTime)
	for range d.Count(2) {
		si := d.Int()
		if si >= len(m.streams) {
			d.Fail("history of stream %d of %d", si, len(m.streams))
			return
		}
		o := m.streams[si]
		n := d.Count(4)
		var h *history // nil: the running ruleset keeps no history of it
		if o.ok && t.rs.Streams[o.now].Retention > 0 {
			h = ks.hist(o.now)
		}
		switch {
		case h == nil:
			for range n {
				readEntry(d, o.fields, -1)
			}
		case m.same:
			t.pastScratch = h.restore(d, n, o.fields, slices.Index(o.fields, t.rs.Streams[o.now].InlineField()), t.pastScratch)
		default:
			t.reproject(d, n, h, o)
		}
	}
}

// restore adds n entries read from d, written under the running ruleset
// version: checked, and kept as they are. A history restores whole and in
// time order, so its entries are mostly copied in one piece. inline is the
// position of the stream's inline field among its history fields (-1:
// none), whose value the marks keep (Mark.Inline), as when the event came.
// The entries' times and marks are read into scratch first, which restore
// returns for the next history.
func (h *history) restore(d *codec.Decoder, n int, fields []string, inline int, scratch []rules.Past) []rules.Past {
	if n == 0 {
		return scratch
	}
	all := d.Remaining()
	past := scratch[:0]
	sorted := true
	for range n {
		ts, mk := readEntry(d, fields, inline)
		if k := len(past); k > 0 && past[k-1].Time > ts {
			sorted = false
		}
		past = append(past, rules.Past{Time: ts, Mark: mk})
	}
	if d.Err() != nil {
		return past
	}
	entries := all[:len(all)-d.Len()]
	if sorted && h.b == nil {
		// Exactly its size: most restored keys get no other event before
		// their history expires (a new key starts with room for
		// historyCap, as it is about to get more).
		h.b = newHistBlock(past, entries, n, len(entries))
		return past
	}
	// Out of order (never written so), or after events it holds: placed
	// one by one.
	e := codec.NewDecoder(entries)
	for range n {
		start := e.Remaining()
		ts, mk := readEntry(e, fields, inline)
		h.addEntry(ts, start[:len(start)-e.Len()], mk)
	}
	return past
}

// reproject adds n entries read from d, written under another ruleset
// version: re-projected to the fields the running rules read, with the
// element predicates computed again.
func (t *Task) reproject(d *codec.Decoder, n int, h *history, o oldStream) {
	st := t.rs.Streams[o.now]
	for range n {
		ts := d.Varint()
		var v any
		if d.Bool() {
			v = stream.DecodeRow(d, o.fields)
		} else {
			v = d.Value()
		}
		readMarks(d)
		if d.Err() != nil {
			return
		}
		fields := rowFields(v, o.fields)
		value, err := historyValue(fields, st.HistoryFields)
		if err != nil {
			d.Fail("history of stream %s: %v", st.Name, err)
			return
		}
		mk, errs := t.ev.Mark(o.now, rules.MapFields(fields))
		h.add(ts, value, mk, errs)
	}
}

// readEntry reads and checks a history entry of a stream with the given
// history fields (see history), returning its time and marks, with the
// value of fields[inline] when it is a string (Mark.Inline). A whole map's
// value is not looked into: a distinct count reads the map instead.
func readEntry(d *codec.Decoder, fields []string, inline int) (int64, rules.Mark) {
	ts := d.Varint()
	var s []byte
	var isStr bool
	if d.Bool() {
		s, isStr = stream.SkipRow(d, fields, inline)
	} else {
		d.SkipValue()
	}
	mk := readMarks(d)
	if isStr {
		mk.Inline = rules.ShortOf(s)
	}
	return ts, mk
}

// decodePatternKey reads one key's state in a pattern.
func (t *Task) decodePatternKey(d *codec.Decoder, op *patternOp, key string) error {
	if op.keys[key] != nil {
		return fmt.Errorf("%w: key %q twice", codec.ErrCorrupt, key)
	}
	pk := &patternKey{key: key, clock: d.Varint(), due: stream.MaxTime, live: true}
	due := d.Varint()
	buf := make([]*cep.Event, d.Count(3))
	for i := range buf {
		buf[i] = &cep.Event{Time: d.Varint(), Seq: d.Uvarint(), Value: decodeEvent(d)}
	}
	pk.buf = buf
	// The state decoded, not one made new (keyState) and then replaced.
	ok := op.nfa.DecodeStateInto(&pk.state, d, decodeEvent)
	if err := d.Err(); err != nil || !ok {
		return cmp.Or(err, fmt.Errorf("%w: pattern state of key %q", codec.ErrCorrupt, key))
	}
	op.keys[key] = pk
	if due != stream.MaxTime {
		pk.due = due
		heap.Push(&op.due, dueEntry{at: due, key: pk})
	}
	return nil
}

// counters lists the Stats fields a snapshot keeps, in a fixed order.
func (s *Stats) counters() []*int64 {
	return []*int64{&s.Records, &s.DLQ, &s.Duplicates, &s.Decisions, &s.WindowResults, &s.Late,
		&s.RuleErrors, &s.HistoryOverflow, &s.Matches, &s.Joins, &s.Timeouts, &s.PartialsDropped,
		&s.Lookups, &s.LookupFallbacks}
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
