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

// Encode writes the Operator's state to e: its bounds, its watermarks, and
// every key's buffered elements of both sides, with enc writing each
// element's Value (nil enc means e.Value, for JSON-like values). Keys go in
// sorted order so that equal states give equal bytes, whatever the order of
// the map. Encode does not change the Operator; an error from enc is
// returned with the key and element it was for, and e then holds a partial
// encoding the caller must discard.
func (o *Operator) Encode(e *codec.Encoder, enc func(e *codec.Encoder, v any) error) error {
	if enc == nil {
		enc = (*codec.Encoder).Value
	}
	e.Varint(o.lo)
	e.Varint(o.hi)
	e.Varint(o.wm)
	e.Varint(o.swept)
	e.Int(len(o.keys))
	for _, key := range slices.Sorted(maps.Keys(o.keys)) {
		ks := o.keys[key]
		e.String(key)
		for side := range ks.sides {
			elems := ks.sides[side].live()
			e.Int(len(elems))
			for _, el := range elems {
				e.Varint(el.Time)
				e.Uvarint(el.Seq)
				if err := enc(e, el.Value); err != nil {
					return fmt.Errorf("join: encoding key %q %s element %d@%d: %w", key, Side(side), el.Seq, el.Time, err)
				}
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
func (o *Operator) Decode(d *codec.Decoder, dec func(d *codec.Decoder) any) error {
	if dec == nil {
		dec = (*codec.Decoder).Value
	}
	lo, hi := d.Varint(), d.Varint()
	if err := d.Err(); err != nil {
		return err
	}
	if lo != o.lo || hi != o.hi {
		return fmt.Errorf("join: state saved for bounds [%s, %s] cannot be restored into an operator with bounds [%s, %s]",
			fmtMillis(lo), fmtMillis(hi), fmtMillis(o.lo), fmtMillis(o.hi))
	}
	wm, swept := d.Varint(), d.Varint()
	if d.Err() == nil && swept > wm {
		d.Fail("join: swept watermark %d above the watermark %d", swept, wm)
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
		ks := &keyState{key: key}
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
					break
				}
				if k := len(b.elems); k > 0 && less(el, b.elems[k-1]) {
					d.Fail("join: key %q %s: element %d@%d out of order", key, b.side, el.Seq, el.Time)
					break
				}
				if _, to, ok := o.reach(b.side, el.Time); !ok || to < swept {
					d.Fail("join: key %q %s: element %d@%d can join nothing at watermark %d", key, b.side, el.Seq, el.Time, swept)
					break
				}
				b.elems = append(b.elems, el)
			}
			if d.Err() != nil {
				break
			}
			if len(b.elems) > 0 {
				_, b.due, _ = o.reach(b.side, b.elems[0].Time)
				heap.Push(&due, b)
				n += len(b.elems)
			}
		}
		if d.Err() != nil {
			break
		}
		if ks.sides[Left].idx < 0 && ks.sides[Right].idx < 0 {
			d.Fail("join: key %q has nothing buffered", key)
			break
		}
		keys[key] = ks
	}
	if err := d.Err(); err != nil {
		return err
	}
	o.wm, o.swept = wm, swept
	o.keys, o.peak = keys, len(keys)
	o.due, o.n = due, n
	return nil
}
