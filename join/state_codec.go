package join

import (
	"container/heap"
	"fmt"
	"maps"
	"slices"

	"github.com/vigil-cep/vigil/internal/codec"
)

// Checkpoint layout of an Operator (see internal/codec for the primitives):
//
//	Varint lo, Varint hi        effective inclusive bounds (after exclusivity)
//	Varint wm                   largest watermark given: decides lateness
//	Varint swept                last watermark Advance swept for
//	Count  keys                 then, for each key in increasing byte order:
//	  String key
//	  Count  left elements      each: Varint Time, Uvarint Seq, Value (enc)
//	  Count  right elements     likewise, both sides in (Time, Seq) order
//
// Only the logical state is written. The due times of the heap are a
// function of each buffer's first element and the bounds, and Len is the
// number of elements, so Decode recomputes them instead of trusting a
// snapshot to keep them consistent. What only concerns this process's
// memory (dropped slots before a buffer's head, the heap's array layout,
// the key map's peak size) is left out: it never changes which pairs are
// emitted, which elements are late, or what Len reports. Because every part
// is canonical (sorted keys, checked order, canonical varints and values),
// a snapshot that decodes re-encodes to the same bytes.
//
// An incremental checkpoint writes the same bytes in pieces: EncodeHeader
// the four watermark and bound fields, EncodeKey a key's two sides (two
// empty sides for a key without state), and DecodeHeader and DecodeKey read
// them back in any key order. A key's part stays valid against the header
// of a later swept watermark as long as Watch did not report the key in
// between: Advance dropped none of its elements, so each can still join.

// Encode writes the Operator's state to e: its bounds, its watermarks, and
// every key's buffered elements of both sides, with enc writing each
// element's Value (nil enc means e.Value, for JSON-like values). Keys go in
// sorted order so that equal states give equal bytes, whatever the order of
// the map. Encode does not change the Operator; an error from enc is
// returned with the key and element it was for, and e then holds a partial
// encoding the caller must discard.
//
// It is EncodeHeader, the key count, and String(key) followed by EncodeKey
// for every key in increasing byte order.
func (o *Operator) Encode(e *codec.Encoder, enc func(e *codec.Encoder, v any) error) error {
	if enc == nil {
		enc = (*codec.Encoder).Value
	}
	o.EncodeHeader(e)
	e.Int(len(o.keys))
	for _, key := range slices.Sorted(maps.Keys(o.keys)) {
		e.String(key)
		if err := encodeKey(e, o.keys[key], enc); err != nil {
			return err
		}
	}
	return nil
}

// EncodeHeader writes what Encode writes before the key count: the
// effective bounds, the watermark and the swept watermark. The per-key
// encodings (EncodeKey) are read against it: whether an element can still
// join depends on the swept watermark.
func (o *Operator) EncodeHeader(e *codec.Encoder) {
	e.Varint(o.lo)
	e.Varint(o.hi)
	e.Varint(o.wm)
	e.Varint(o.swept)
}

// Keys yields every key the operator holds state for, in no particular
// order (for range op.Keys). The operator must not change meanwhile.
func (o *Operator) Keys(yield func(key string) bool) { maps.Keys(o.keys)(yield) }

// HasKey reports whether o buffers any element of key.
func (o *Operator) HasKey(key string) bool {
	_, ok := o.keys[key]
	return ok
}

// EncodeKey writes the state of one key as Encode writes it after the key's
// string: its left elements, then its right elements, with enc as in
// Encode. A key without state writes the empty form, two empty sides, which
// DecodeKey accepts and Decode refuses (Encode never writes such a key).
// It fails only as Encode does.
func (o *Operator) EncodeKey(e *codec.Encoder, key string, enc func(*codec.Encoder, any) error) error {
	ks := o.keys[key]
	if ks == nil {
		e.Int(0)
		e.Int(0)
		return nil
	}
	if enc == nil {
		enc = (*codec.Encoder).Value
	}
	return encodeKey(e, ks, enc)
}

// encodeKey writes both sides of ks.
func encodeKey(e *codec.Encoder, ks *keyState, enc func(*codec.Encoder, any) error) error {
	for side := range ks.sides {
		elems := ks.sides[side].live()
		e.Int(len(elems))
		for _, el := range elems {
			e.Varint(el.Time)
			e.Uvarint(el.Seq)
			if err := enc(e, el.Value); err != nil {
				return fmt.Errorf("join: encoding key %q %s element %d@%d: %w", ks.key, Side(side), el.Seq, el.Time, err)
			}
		}
	}
	return nil
}

// live returns the buffered elements of b, in (Time, Seq) order.
func (b *buffer) live() []*Element { return b.elems[b.head:] }

// Decode replaces the state of o, an Operator built by New with the same
// bounds and condition as the one that was encoded, with what Encode wrote;
// dec reads one element's Value (nil dec means d.Value). The condition is
// code and is not in the snapshot: restoring with a different one silently
// changes the join, so the caller must pass the same.
//
// State saved for other effective bounds is refused with an error naming
// both, rather than restored into a join it would not fit (its buffers were
// cut for the old bounds). Corrupt input is reported through d (the error
// wraps codec.ErrCorrupt) and never panics. Besides what the codec checks,
// Decode refuses state the Operator could not have produced, because the
// Operator relies on it: keys out of order or repeated, a key with nothing
// buffered, a buffer out of (Time, Seq) order, an element no future element
// can join, or a swept watermark above the watermark. On any error o is
// left unchanged.
//
// It reads what DecodeHeader and DecodeKey read, with the same checks.
// Unlike a run of DecodeKey calls, which adds each key once it passed, it
// builds the whole state aside and installs it only once all of it passed.
func (o *Operator) Decode(d *codec.Decoder, dec func(d *codec.Decoder) any) error {
	if dec == nil {
		dec = (*codec.Decoder).Value
	}
	wm, swept, err := o.decodeHeader(d)
	if err != nil {
		return err
	}
	// Each key takes at least three bytes: its length and two counts.
	nkeys := d.Count(3)
	keys := make(map[string]*keyState, nkeys)
	var due dueHeap
	n := 0
	prev := ""
	for i := range nkeys {
		key := d.String()
		if d.Err() != nil {
			break
		}
		if i > 0 && key <= prev {
			d.Fail("join: key %q after %q: keys not in increasing order", key, prev)
			break
		}
		prev = key
		ks, m := o.decodeKey(d, key, swept, dec, false)
		if d.Err() != nil {
			break
		}
		ks.schedule(&due)
		keys[key] = ks
		n += m
	}
	if err := d.Err(); err != nil {
		return err
	}
	o.wm, o.swept = wm, swept
	o.keys, o.peak = keys, len(keys)
	o.due, o.n = due, n
	return nil
}

// DecodeHeader reads what EncodeHeader wrote into o, an Operator built by
// New with the same bounds and condition, with the checks of Decode: state
// saved for other bounds is refused with the same error, and a swept
// watermark above the watermark as corrupt. Like Decode, it replaces o's
// state: o then buffers nothing, and DecodeKey checks every key against the
// header's swept watermark. On error o is left as it was.
func (o *Operator) DecodeHeader(d *codec.Decoder) error {
	wm, swept, err := o.decodeHeader(d)
	if err != nil {
		return err
	}
	o.wm, o.swept = wm, swept
	o.keys, o.peak = make(map[string]*keyState), 0
	o.due, o.n = nil, 0
	return nil
}

// DecodeKey reads the state of key as EncodeKey wrote it and adds it to o,
// after DecodeHeader; dec reads one element's Value (nil dec means
// d.Value). It checks what Decode checks of a key's buffers ((Time, Seq)
// order, every element able to join at o's swept watermark) and schedules
// their drops; keys may come in any order. A key o already holds is
// refused; the empty form adds nothing. Corrupt input is reported through d
// as by Decode, and on error o is left as it was. o keeps key: a restore
// passes the string it keeps for the key everywhere, not a slice of a
// buffer.
func (o *Operator) DecodeKey(d *codec.Decoder, key string, dec func(*codec.Decoder) any) error {
	if err := d.Err(); err != nil {
		return err
	}
	if o.keys[key] != nil {
		d.Fail("join: key %q restored twice", key)
		return d.Err()
	}
	if dec == nil {
		dec = (*codec.Decoder).Value
	}
	ks, m := o.decodeKey(d, key, o.swept, dec, true)
	if err := d.Err(); err != nil {
		return err
	}
	if ks == nil {
		return nil
	}
	ks.schedule(&o.due)
	o.keys[ks.key] = ks
	o.peak = max(o.peak, len(o.keys))
	o.n += m
	return nil
}

// decodeHeader reads the header, checks it, and returns its watermarks.
// Other bounds are refused with a plain error, not through d: the state is
// sound, only not for this join.
func (o *Operator) decodeHeader(d *codec.Decoder) (wm, swept int64, err error) {
	lo, hi := d.Varint(), d.Varint()
	if err := d.Err(); err != nil {
		return 0, 0, err
	}
	if lo != o.lo || hi != o.hi {
		return 0, 0, fmt.Errorf("join: state saved for bounds [%s, %s] cannot be restored into an operator with bounds [%s, %s]",
			fmtMillis(lo), fmtMillis(hi), fmtMillis(o.lo), fmtMillis(o.hi))
	}
	wm, swept = d.Varint(), d.Varint()
	if d.Err() == nil && swept > wm {
		d.Fail("join: swept watermark %d above the watermark %d", swept, wm)
	}
	return wm, swept, d.Err()
}

// decodeKey reads both sides of key, checked against the swept watermark,
// into a new key state that is in neither o.keys nor the heap, and returns
// it with its number of elements. It returns nil when d fails, and for the
// empty form (nothing buffered), which it refuses unless allowEmpty.
func (o *Operator) decodeKey(d *codec.Decoder, key string, swept int64, dec func(*codec.Decoder) any, allowEmpty bool) (*keyState, int) {
	ks := &keyState{key: key}
	n := 0
	for side := range ks.sides {
		b := &ks.sides[side]
		*b = buffer{ks: ks, side: Side(side), idx: -1}
		// Each element takes at least two bytes: Time and Seq.
		m := d.Count(2)
		if m > 0 {
			b.elems = make([]*Element, 0, m)
		}
		for range m {
			el := &Element{Time: d.Varint(), Seq: d.Uvarint()}
			el.Value = dec(d)
			if d.Err() != nil {
				return nil, 0
			}
			if k := len(b.elems); k > 0 && less(el, b.elems[k-1]) {
				d.Fail("join: key %q %s: element %d@%d out of order", key, b.side, el.Seq, el.Time)
				return nil, 0
			}
			if _, to, ok := o.reach(b.side, el.Time); !ok || to < swept {
				d.Fail("join: key %q %s: element %d@%d can join nothing at watermark %d", key, b.side, el.Seq, el.Time, swept)
				return nil, 0
			}
			b.elems = append(b.elems, el)
		}
		if d.Err() != nil {
			return nil, 0
		}
		if len(b.elems) > 0 {
			_, b.due, _ = o.reach(b.side, b.elems[0].Time)
			n += len(b.elems)
		}
	}
	if n == 0 {
		if !allowEmpty {
			d.Fail("join: key %q has nothing buffered", key)
		}
		return nil, 0
	}
	return ks, n
}

// schedule pushes the non-empty buffers of a decoded key onto due, left
// first, as Decode always has.
func (ks *keyState) schedule(due *dueHeap) {
	for side := range ks.sides {
		if b := &ks.sides[side]; len(b.elems) > 0 {
			heap.Push(due, b)
		}
	}
}
