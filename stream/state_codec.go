package stream

import (
	"fmt"
	"unsafe"

	"github.com/vigil-cep/vigil/internal/codec"
)

// Checkpoint layout of a Watermarks (see internal/codec for the primitives):
//
//	Varint current              the task watermark: it never goes back
//	Varint floor                the RaiseAll watermark, for inputs not seen yet
//	Count  inputs               then, in the order they appeared (Inputs()):
//	  Varint Stream, Varint Partition
//	  Varint MaxOutOfOrder, Varint IdleAfter
//	  Varint maxSeen, Varint explicit, Varint lastActive
//
// Idleness is not stored as a flag: it is a function of lastActive, IdleAfter
// and the clock, so writing lastActive (a reading of the Clock) restores it
// exactly. Every part is canonical, so a snapshot that decodes re-encodes to
// the same bytes.
//
// Checkpoint layout of a Row: Count values, then for each field in the
// order of the stream's names, Bool present and, if present, its Value.
// Names are not written: every row of a stream shares them, so the caller
// writes them once.

// Encode writes the tracker's state to e: the task watermark, the RaiseAll
// floor (which still applies to inputs that first appear after a restore),
// and every input with its configuration, largest event time, explicit
// watermark and last activity, in the order the inputs appeared, so that
// Inputs() keeps its order. The Clock is not state: Decode keeps its own.
func (w *Watermarks) Encode(e *codec.Encoder) {
	e.Varint(w.current)
	e.Varint(w.floor)
	e.Int(len(w.inputs))
	for _, in := range w.inputs {
		e.Varint(int64(in.ID.Stream))
		e.Varint(int64(in.ID.Partition))
		e.Varint(in.cfg.MaxOutOfOrder)
		e.Varint(in.cfg.IdleAfter)
		e.Varint(in.maxSeen)
		e.Varint(in.explicit)
		e.Varint(in.lastActive)
	}
}

// Decode replaces the state of w, a tracker built by NewWatermarks, with what
// Encode wrote. Afterwards Input(id, cfg) returns the restored input for every
// saved id (cfg is ignored for them, as for any known input) and Inputs() lists
// them in their original order; pointers taken from w before Decode are stale.
//
// Last activity is a reading of the Clock, restored as it was: w's clock must
// be of the same kind as the original's (the same wall clock after a crash, a
// manual clock at the same reading in a test). Time spent down then counts as
// silence, exactly as it would have for the original, so an input silent for
// its IdleAfter across a restart is idle at once. A service that prefers to
// give every input a fresh IdleAfter after a restart can Raise each one to
// MinTime, which counts as activity and changes nothing else.
//
// Corrupt input is reported through d (the error wraps codec.ErrCorrupt) and
// never panics. Besides what the codec checks, Decode refuses what the tracker
// could not have produced: an id that does not fit InputID, a repeated id, or
// an explicit watermark below the RaiseAll floor (every input is raised to it).
// On error w is left unchanged.
func (w *Watermarks) Decode(d *codec.Decoder) error {
	current, floor := d.Varint(), d.Varint()
	// Each input takes at least seven bytes: seven varints.
	n := d.Count(7)
	inputs := make([]*Input, 0, n)
	index := make(map[InputID]*Input, n)
	for range n {
		stream, partition := d.Varint(), d.Varint()
		in := &Input{cfg: WatermarkConfig{MaxOutOfOrder: d.Varint(), IdleAfter: d.Varint()}}
		in.maxSeen, in.explicit, in.lastActive = d.Varint(), d.Varint(), d.Varint()
		if d.Err() != nil {
			break
		}
		in.ID = InputID{Stream: int(stream), Partition: int32(partition)}
		switch {
		case int64(in.ID.Stream) != stream || int64(in.ID.Partition) != partition:
			d.Fail("stream: input %d/%d out of range", stream, partition)
		case index[in.ID] != nil:
			d.Fail("stream: input %d/%d appears twice", stream, partition)
		case in.explicit < floor:
			d.Fail("stream: input %d/%d explicit watermark %d below the floor %d", stream, partition, in.explicit, floor)
		}
		if d.Err() != nil {
			break
		}
		index[in.ID] = in
		inputs = append(inputs, in)
	}
	if err := d.Err(); err != nil {
		return err
	}
	w.current, w.floor = current, floor
	w.inputs, w.index = inputs, index
	return nil
}

// AppendRow writes to e the row NewRow(names, fields) would build, without
// building it: its values in the order of names, marking fields the event
// did not have apart from JSON nulls. Names are not written (a stream's rows
// share them). History keeps its rows encoded so (engine), and DecodeRow
// builds a Row from them when an expression reads one. A value the codec
// cannot write is an error naming the field; e then holds a partial
// encoding the caller must discard. As everywhere in checkpoints, an int
// value comes back as an int64; decoded JSON holds float64 numbers, which
// come back exactly.
func AppendRow(e *codec.Encoder, names []string, fields map[string]any) error {
	e.Int(len(names))
	for _, n := range names {
		v, ok := fields[n]
		if err := appendRowValue(e, n, v, ok); err != nil {
			return err
		}
	}
	return nil
}

// AppendRowFromSlots is AppendRow for an event decoded into slots: the value
// of names[i] is slots[at[i]], and the event lacks the field when that is
// absentMark.
func AppendRowFromSlots(e *codec.Encoder, names []string, at []int, slots []any, absentMark any) error {
	e.Int(len(names))
	for i, n := range names {
		v := slots[at[i]]
		if err := appendRowValue(e, n, v, v != absentMark); err != nil {
			return err
		}
	}
	return nil
}

func appendRowValue(e *codec.Encoder, name string, v any, ok bool) error {
	e.Bool(ok)
	if !ok {
		return nil
	}
	if err := e.Value(v); err != nil {
		return fmt.Errorf("stream: encoding row field %q: %w", name, err)
	}
	return nil
}

// SkipRow reads past a row AppendRow wrote for names, checking it as
// DecodeRow does, without building it. It returns the value of names[at]
// when it is a string, as a view of d's input (at -1: none).
func SkipRow(d *codec.Decoder, names []string, at int) (s []byte, isString bool) {
	if n := d.Count(1); d.Err() == nil && n != len(names) {
		d.Fail("stream: row has %d values for %d fields", n, len(names))
	}
	for i := range names {
		if d.Err() != nil {
			return nil, false
		}
		if !d.Bool() {
			continue
		}
		if i == at {
			s, isString = d.SkipValueString()
		} else {
			d.SkipValue()
		}
	}
	return s, isString && d.Err() == nil
}

// DecodeRow reads a row written by AppendRow for names, which must be the
// names (same ones, same order) the row was built with; the row keeps names
// without copying, as NewRow does. It lays the row out as NewRow would have
// (the same values inline, the same strings copied into the row's own bytes). A value count other than len(names), or corrupt input, fails d
// (the error wraps codec.ErrCorrupt) and DecodeRow returns nil.
func DecodeRow(d *codec.Decoder, names []string) *Row {
	// Each value takes at least one byte: its presence flag.
	if n := d.Count(1); d.Err() == nil && n != len(names) {
		d.Fail("stream: row has %d values for %d fields", n, len(names))
	}
	if d.Err() != nil {
		return nil
	}
	r := &Row{names: names}
	if len(names) <= rowInline {
		r.vals = r.inline[:len(names)]
	} else {
		r.vals = make([]any, len(names))
	}
	used := 0
	for i := range names {
		var v any = absent{}
		if d.Bool() {
			x, s, isStr := d.StringOrValue()
			switch {
			case !isStr:
				v = x
			case len(s) > 0 && used+len(s) <= rowBytes:
				// The same rule as NewRow: non-empty strings go inline, in
				// field order, while they fit; others are copied on their
				// own. Neither pins the decoder's input.
				copy(r.bytes[used:], s)
				v = unsafe.String(&r.bytes[used], len(s)) // r is immutable from here on
				used += len(s)
			default:
				v = string(s)
			}
		}
		r.vals[i] = v
	}
	if d.Err() != nil {
		return nil
	}
	return r
}
