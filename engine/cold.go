package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/vigil-cep/vigil/internal/codec"
	"github.com/vigil-cep/vigil/stream"
)

// Cold keys (docs/design.md "Idle keys, kept as their records").
//
// A key no checkpoint interval has changed for a while is kept as its
// checkpoint record (encodeKeyRecord) in large byte chunks that hold no
// pointer, instead of as the five objects or so its state takes in the
// task and its operators. The collector marks a chunk and does not scan it,
// so a cycle costs what the keys in use cost, not every key held: at a
// million users most are idle, and marking their objects was most of every
// cycle (docs/performance.md). A key thaws, decoded as a restore decodes
// it, when it is next looked up (an event, a query, a decision waiting for
// the watermark) or before the watermark reaches the first time at which
// the task would change its state on its own (wake: a window firing or
// dropping, a pattern's deadline or buffered events, a join dropping
// elements, the sweep forgetting it). Since a record restores the key's
// state exactly, a task goes on byte for byte as if the key had never been
// frozen, whichever keys freeze and when (TestColdKeys); the policy (Cool)
// only decides what it costs.
//
// Like Flink's RocksDB state backend, which keeps state serialized outside
// the JVM heap, and for the same reason, but without a second store: the
// record is the one checkpoints already write, and a frozen key's record is
// what the next checkpoint copies. A restore under the running layout
// leaves every key frozen, its wake read from the record (recordWake).
//
// The store of frozen keys is coldKeys (coldkeys.go).

// warmLead (Task.warmLead; tests set less) is how far ahead of the watermark a frozen key's wake may be
// for Warm to thaw it, and how close to it a key's wake keeps it from
// freezing: a minute of event time, in which a live stream's keys due at
// one time (a tumbling window's end: every key that paid in the hour) thaw
// a slice at a time rather than all at once when the watermark gets there.
const warmLead = 60_000

// freeze moves the state of ks's key out of the task and its operators into
// t.cold, as its record, unless its wake is within warmLead of the
// watermark (it reports whether it froze the key).
func (t *Task) freeze(ks *keyState) bool {
	key := ks.key
	wake, eager := t.wake(ks)
	if wake <= stream.AddSat(t.wm, t.warmLead) {
		return false
	}
	e := codec.NewEncoder(t.coldBuf[:0])
	if err := t.encodeKeyRecord(e, key); err != nil {
		return false // an event value the codec cannot write: the key stays as it is
	}
	t.coldBuf = e.Bytes()
	for _, op := range t.patterns {
		if pk := op.keys[key]; pk != nil {
			op.coldDropped += pk.state.Dropped()
			op.coldPartials += pk.state.Len()
		}
	}
	t.forget(key)
	t.cold.put(key, keyHash(key), t.coldBuf, wake, eager, true)
	return true
}

// wake returns the first watermark at which the task would change the state
// of ks's key on its own, and the first for its patterns and joins (eager).
func (t *Task) wake(ks *keyState) (wake, eager int64) {
	eager = stream.MaxTime
	for _, op := range t.patterns {
		if pk := op.keys[ks.key]; pk != nil {
			eager = min(eager, pk.due)
		}
	}
	for _, jo := range t.joins {
		eager = min(eager, jo.op.NextDue(ks.key))
	}
	wake = eager
	if ks.slot > 0 {
		wake = min(wake, sweepWake(ks.bucket, t.maxRetain))
	}
	for _, op := range t.windows {
		wake = min(wake, op.NextTimer(ks.key))
	}
	return wake, eager
}

// sweepWake is when the sweep drops a key listed in bucket: once the
// horizon of the longest retention has passed the bucket (sweepQueue.due).
func sweepWake(bucket, maxRetain int64) int64 {
	return stream.AddSat(stream.AddSat(bucket*sweepEvery, sweepEvery), maxRetain)
}

// recordWake returns the wake of the key whose record (written under
// layout m) is rec, read without decoding it: the sweep's from its last
// event time, a pattern's due time, and for its windows the first one's end
// (less one), at or before every window's timer (armed at end-1, cleaned up
// later); and its patterns' wake (eager). It reports false for a
// record with join state, whose wake it would have to decode, and for one
// it cannot read.
func (t *Task) recordWake(rec []byte, m *layoutMap) (wake, eager int64, ok bool) {
	d := codec.NewDecoder(rec)
	wake, eager = stream.MaxTime, stream.MaxTime
	if d.Bool() {
		wake = sweepWake(bucketOf(d.Varint()), t.maxRetain)
		for range d.Count(2) {
			si := d.Int()
			if si >= len(m.streams) {
				return 0, 0, false
			}
			for range d.Count(4) {
				readEntry(d, m.streams[si].fields, -1)
			}
		}
	}
	for range d.Count(2) {
		if d.Int() >= len(m.windows) {
			return 0, 0, false
		}
		w := codec.NewDecoder(d.View())
		if w.Count(1) > 0 {
			start, length := w.Varint(), w.Uvarint()
			if w.Err() != nil || length > uint64(math.MaxInt64) {
				return 0, 0, false
			}
			wake = min(wake, stream.AddSat(start, int64(length)-1))
		}
	}
	for range d.Count(2) {
		if d.Int() >= len(m.patterns) {
			return 0, 0, false
		}
		p := codec.NewDecoder(d.View())
		p.Varint() // the clock
		due := p.Varint()
		if p.Err() != nil {
			return 0, 0, false
		}
		eager = min(eager, due)
	}
	if d.Count(2) > 0 || d.Finish() != nil {
		return 0, 0, false
	}
	return min(wake, eager), eager, true
}

// thaw puts the state of the frozen key of entry i back, as a restore does,
// untouched since the last cut as far as tracking goes.
func (t *Task) thaw(i int) {
	key := string(t.cold.key(i))
	rec := t.cold.rec(i) // stays valid: chunks are only appended to
	counted := t.cold.ents[i].counted
	at := stream.MaxTime // the record is of the watermark now
	if t.cold.ents[i].late {
		at = t.cold.ents[i].at // its windows due since are overdue (postpone)
	}
	t.cold.remove(i)
	if t.coldLayout == nil {
		m, err := t.readLayout(t.layout())
		if err != nil {
			panic(fmt.Sprintf("engine: the task's own layout: %v", err))
		}
		t.coldLayout = m
	}
	if err := t.decodeKeyRecord(key, rec, t.coldLayout, at); err != nil {
		// A record restored frozen that does not decode: its checkpoint
		// passed its checksum, so it was written so (a bug, or a file made
		// to). What of it was decoded goes too, and the loss is counted
		// (Stats.ThawErrors), rather than the task stopping.
		t.forget(key)
		t.stats.ThawErrors++
		t.lastThawError = fmt.Errorf("key %q: %w", key, err)
		return
	}
	if ks := t.keys.get(key, keyHash(key)); ks != nil {
		ks.stamp = t.epoch - 1 // its next change is one since the cut (touch)
		if at != stream.MaxTime && ks.slot > 0 && sweepWake(ks.bucket, t.maxRetain) <= t.lastSweep {
			// Left frozen past its sweep's wake (thawDue), and a sweep has
			// been since: it would have thawed and been forgotten there.
			t.sweepNow(ks)
		}
	}
	if counted {
		for _, op := range t.patterns {
			if pk := op.keys[key]; pk != nil {
				op.coldDropped -= pk.state.Dropped()
				op.coldPartials -= pk.state.Len()
			}
		}
	}
}

// forget drops what the task and its operators hold of key, without a
// trace: no pointer to it stays behind (freeze keeps its record first).
func (t *Task) forget(key string) {
	for _, op := range t.windows {
		op.RemoveKey(key)
	}
	for _, op := range t.patterns {
		if pk := op.keys[key]; pk != nil {
			pk.live, pk.due = false, stream.MaxTime // its entries in op.due go stale
			delete(op.keys, key)
		}
	}
	for _, jo := range t.joins {
		jo.op.RemoveKey(key)
	}
	if ks := t.keys.get(key, keyHash(key)); ks != nil {
		if ks.slot > 0 {
			t.idle.unlist(ks)
		}
		t.keys.delete(ks)
	}
}

// ThawError returns the last error of a frozen key that could not be
// thawed (Stats.ThawErrors counts them), or nil.
func (t *Task) ThawError() error { return t.lastThawError }

// thawKey thaws key (hash h) if it is frozen.
func (t *Task) thawKey(key string, h uint64) {
	if t.cold.len() > 0 {
		if i := t.cold.find(key, h); i >= 0 {
			t.thaw(i)
		}
	}
}

// thawDue thaws every key whose wake is at or before wm: all of them at the
// maximum watermark, which ends every partial match (endPattern).
//
// A task firing in slices (SliceFiring) leaves frozen a key whose windows
// or sweep alone are due: they would only fire, or forget it, and a million
// of them thawing in the one advance held the task for seconds. Such a key
// thaws, with its windows overdue and forgotten if a sweep since would have
// (thaw), when it is next used or when Drain comes to it (thawLater).
func (t *Task) thawDue(wm int64) {
	if wm == stream.MaxTime {
		for t.cold.len() > 0 {
			t.thaw(t.cold.len() - 1)
		}
		t.thawLater = nil
		return
	}
	for i := t.cold.due(wm); i >= 0; i = t.cold.due(wm) {
		if en := &t.cold.ents[i]; t.sliced && !en.late && en.eager > wm {
			t.thawLater = append(t.thawLater, string(t.cold.key(i)))
			t.cold.postpone(i, t.wm)
			t.overdue = true
			continue
		}
		t.thaw(i)
	}
}

// Epoch numbers the task's cuts: it grows by one at each Cut (and Track).
// A key's last change is in the epoch that was current then.
func (t *Task) Epoch() uint32 { return t.epoch }

// Cool freezes, for about budget, the keys whose last change came before
// epoch (Epoch), going on through the task's keys from where the last call
// stopped; it reports whether it has been through all of them since the
// pass began. A budget of 0 or less makes the whole pass. Only a tracked
// task between cuts freezes keys (a key's epoch is known only there);
// otherwise Cool does nothing and reports true.
//
// A driver calls it a slice at a time between batches, as it calls Step,
// with the epoch of a cut a while ago: the keys no change has touched
// since. Which keys freeze changes nothing but cost (see above).
func (t *Task) Cool(budget time.Duration, epoch uint32) bool {
	if !t.track || t.cut != nil {
		return true
	}
	start := time.Now()
	for n := 0; ; n++ {
		slots := t.keys.slots
		if t.coolAt >= len(slots) {
			t.coolAt = 0
			t.keys.shrink()
			return true
		}
		if budget > 0 && n%64 == 63 && time.Since(start) >= budget {
			return false
		}
		// A freeze deletes from the table by backward shift, which may
		// move a later key into this slot: look at it again then.
		if ks := slots[t.coolAt].ks; ks != nil && int32(epoch-ks.stamp) > 0 && t.freeze(ks) {
			continue // the slot now holds another key, or none
		}
		t.coolAt++
	}
}

// Warm thaws, for about budget (0 or less: all of them), the frozen keys
// whose wake is within warmLead of the watermark, and reports whether none
// is left. A driver calls it a slice at a time between batches while
// Warming says there are some.
func (t *Task) Warm(budget time.Duration) bool {
	start := time.Now()
	for n := 0; ; n++ {
		i := t.cold.due(stream.AddSat(t.wm, t.warmLead))
		if i < 0 || t.wm == stream.MinTime {
			return true
		}
		if budget > 0 && n%16 == 15 && time.Since(start) >= budget {
			return false
		}
		t.thaw(i)
	}
}

// Warming reports whether Warm has keys to thaw.
func (t *Task) Warming() bool {
	return t.wm != stream.MinTime && t.cold.due(stream.AddSat(t.wm, t.warmLead)) >= 0
}

// Cold returns how many keys are frozen, and the bytes they take.
func (t *Task) Cold() (keys, bytes int) { return t.cold.len(), t.cold.bytes() }
