package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"slices"
)

// FormatVersion is the version of the checkpoint file format that Encode
// writes. Decode reads it and every older version down to
// MinFormatVersion: version 1 has no parent field and decodes with Parent 0.
const FormatVersion = 2

// MinFormatVersion is the oldest file format version Decode reads.
const MinFormatVersion = 1

const (
	magic   = "VIGILCKP"
	crcSize = 4
	// minEntry is the smallest encoding of one offset or section entry: an
	// empty name (one length byte) and a one-byte value or length.
	minEntry = 2
	// maxMapHint caps the size hint of Decode's maps, so that a count that
	// is large but still under the input size does not pre-allocate memory
	// the entries would never fill.
	maxMapHint = 1024
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error Decode returns for bytes that are not
// a well-formed checkpoint: wrong magic, truncated, checksum mismatch,
// malformed or non-canonical contents. Dir.Chain wraps it too when a task
// has snapshot files but no chain of them restores.
var ErrCorrupt = errors.New("state: corrupt checkpoint")

// VersionError is returned by Decode for a file with a valid magic header
// and a format version this build does not read.
type VersionError struct {
	Version uint64 // the version the file declares
}

// Error says which version was found and which one this build reads.
func (e *VersionError) Error() string {
	return fmt.Sprintf("state: checkpoint format version %d is not supported (this build reads versions %d to %d)",
		e.Version, MinFormatVersion, FormatVersion)
}

// Snapshot is one checkpoint of one task. Package state does not interpret
// Offsets or Sections; the task fills them and reads them back.
//
// A snapshot with Parent 0 is a base: complete in itself. One with a
// non-zero Parent is a delta on the snapshot of that Seq, which must be
// below its own. A task restores from a chain: a base followed by the deltas
// saved on it, each delta's Parent being the Seq of the one before it (see
// Dir.Chain). As Parent 0 means a base, a snapshot with Seq 0 cannot have
// deltas: a task that saves deltas numbers its snapshots from 1. What a
// delta's sections mean relative to its parent is up to the task.
type Snapshot struct {
	Task     int32             // the task (partition) it belongs to
	Seq      uint64            // increasing checkpoint number
	Parent   uint64            // the Seq of the snapshot this one is a delta on; 0: complete in itself
	Offsets  map[string]int64  // input "topic/partition" -> next offset to read; output offsets likewise
	Sections map[string][]byte // opaque, named by the task ("history", "windows", ...)
}

// ParentBelow reports whether s's Parent can be a snapshot before it: a base
// (Parent 0) always, a delta when its Parent is below its Seq. Decode leaves
// this to the stores, which skip a snapshot that fails it as corrupt.
func (s *Snapshot) ParentBelow() bool { return s.Parent == 0 || s.Parent < s.Seq }

// Encode returns the file format (version FormatVersion) of s: the magic
// header "VIGILCKP", the format version, the task, the sequence number, the
// parent, the offsets and then the sections, each group in sorted name
// order, and a CRC-32C of everything before it (see the package
// documentation). The bytes depend only on the contents of s, never on map
// iteration order. s must not be nil.
func Encode(s *Snapshot) []byte {
	return encodeVersion(s, FormatVersion)
}

// encodeVersion is Encode in the given format version (tests write version
// 1 files with it; version 1 cannot hold a Parent, which it drops).
func encodeVersion(s *Snapshot, version uint64) []byte {
	var buf bytes.Buffer
	// Writes to a bytes.Buffer cannot fail.
	_ = writeSnapshot(&buf, s, version)
	return buf.Bytes()
}

// writeSnapshot writes encodeVersion(s, version) to w without copying the
// sections, so that Save does not hold a second copy of a large snapshot in
// memory.
func writeSnapshot(w io.Writer, s *Snapshot, version uint64) error {
	crc := crc32.New(castagnoli)
	mw := io.MultiWriter(w, crc)
	hdr := make([]byte, 0, 256)
	hdr = append(hdr, magic...)
	hdr = binary.AppendUvarint(hdr, version)
	hdr = binary.AppendVarint(hdr, int64(s.Task))
	hdr = binary.AppendUvarint(hdr, s.Seq)
	if version >= 2 {
		hdr = binary.AppendUvarint(hdr, s.Parent)
	}
	hdr = binary.AppendUvarint(hdr, uint64(len(s.Offsets)))
	for _, name := range slices.Sorted(maps.Keys(s.Offsets)) {
		hdr = appendString(hdr, name)
		hdr = binary.AppendVarint(hdr, s.Offsets[name])
	}
	hdr = binary.AppendUvarint(hdr, uint64(len(s.Sections)))
	for _, name := range slices.Sorted(maps.Keys(s.Sections)) {
		data := s.Sections[name]
		hdr = appendString(hdr, name)
		hdr = binary.AppendUvarint(hdr, uint64(len(data)))
		if _, err := mw.Write(hdr); err != nil {
			return err
		}
		if _, err := mw.Write(data); err != nil {
			return err
		}
		hdr = hdr[:0]
	}
	if _, err := mw.Write(hdr); err != nil {
		return err
	}
	// The checksum covers everything before it, so it goes to w alone.
	_, err := w.Write(binary.LittleEndian.AppendUint32(hdr[:0], crc.Sum32()))
	return err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode parses the file format written by Encode, and the older versions
// down to MinFormatVersion (a version 1 file decodes with Parent 0). It
// checks the magic header, then the version (a *VersionError if this build
// does not read it), then the checksum, then the contents; every other
// failure wraps ErrCorrupt. It accepts only the canonical encoding (minimal
// varints, strictly increasing names, no trailing bytes), so
// Encode(Decode(b)) equals b whenever Decode succeeds on a version
// FormatVersion file (an older file re-encodes in the current version).
// Decode checks the form, not the meaning: it accepts any Parent, even one
// not below Seq (Dir.Chain refuses those). Counts and lengths are checked
// against the bytes left before anything is allocated, and Decode never
// panics.
//
// The returned snapshot's maps are never nil, and its sections alias b: the
// caller must not modify b while it uses them.
func Decode(b []byte) (*Snapshot, error) {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a checkpoint (bad magic header)", ErrCorrupt)
	}
	r := reader{b: b, off: len(magic)}
	version := r.uvarint("version")
	if r.err != nil {
		return nil, r.err
	}
	if version < MinFormatVersion || version > FormatVersion {
		return nil, &VersionError{Version: version}
	}
	if len(b)-r.off < crcSize {
		return nil, fmt.Errorf("%w: truncated: %d bytes", ErrCorrupt, len(b))
	}
	body := b[:len(b)-crcSize]
	want := binary.LittleEndian.Uint32(b[len(body):])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum mismatch: computed %08x, stored %08x", ErrCorrupt, got, want)
	}
	r.b = body

	task := r.varint("task")
	seq := r.uvarint("seq")
	var parent uint64
	if version >= 2 {
		parent = r.uvarint("parent")
	}
	if r.err == nil && (task < math.MinInt32 || task > math.MaxInt32) {
		r.fail("task %d out of int32 range", task)
	}
	s := &Snapshot{Task: int32(task), Seq: seq, Parent: parent}

	n := r.count("offsets")
	s.Offsets = make(map[string]int64, min(n, maxMapHint))
	prev := ""
	for i := range n {
		name := string(r.bytes("offset name"))
		if r.err == nil && i > 0 && name <= prev {
			r.fail("offset %q not after %q", name, prev)
		}
		s.Offsets[name] = r.varint("offset value")
		if r.err != nil {
			return nil, r.err
		}
		prev = name
	}

	n = r.count("sections")
	prev = ""
	s.Sections = make(map[string][]byte, min(n, maxMapHint))
	for i := range n {
		name := string(r.bytes("section name"))
		if r.err == nil && i > 0 && name <= prev {
			r.fail("section %q not after %q", name, prev)
		}
		s.Sections[name] = r.bytes("section " + name)
		if r.err != nil {
			return nil, r.err
		}
		prev = name
	}
	if r.err == nil && r.off != len(body) {
		r.fail("%d trailing bytes", len(body)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// maxHeader bounds the encoded header up to and including the parent: the
// magic and four varints of at most 10 bytes each.
const maxHeader = len(magic) + 4*binary.MaxVarintLen64

// peekParent reads the header at the start of an encoded snapshot, without
// checking the checksum, and returns its Seq and Parent (0 for version 1).
// b may be just the first maxHeader bytes of the file. ok is false if the
// header cannot be parsed.
func peekParent(b []byte) (seq, parent uint64, ok bool) {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return 0, 0, false
	}
	r := reader{b: b, off: len(magic)}
	version := r.uvarint("version")
	if r.err != nil || version < MinFormatVersion || version > FormatVersion {
		return 0, 0, false
	}
	r.varint("task")
	seq = r.uvarint("seq")
	if version >= 2 {
		parent = r.uvarint("parent")
	}
	return seq, parent, r.err == nil
}

// reader reads the canonical encoding; the first failure sticks in err and
// turns every later read into a no-op.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

// uvarintLen checks the varint at r.off and returns its length, or 0 after
// recording a failure.
func (r *reader) uvarintLen(what string) int {
	if r.err != nil {
		return 0
	}
	_, n := binary.Uvarint(r.b[r.off:])
	switch {
	case n == 0:
		r.fail("%s: truncated at byte %d", what, r.off)
		return 0
	case n < 0:
		r.fail("%s: varint overflows 64 bits at byte %d", what, r.off)
		return 0
	case n > 1 && r.b[r.off+n-1] == 0:
		// A zero last byte adds nothing: the value has a shorter encoding.
		r.fail("%s: non-minimal varint at byte %d", what, r.off)
		return 0
	}
	return n
}

func (r *reader) uvarint(what string) uint64 {
	n := r.uvarintLen(what)
	if n == 0 {
		return 0
	}
	v, _ := binary.Uvarint(r.b[r.off:])
	r.off += n
	return v
}

func (r *reader) varint(what string) int64 {
	n := r.uvarintLen(what)
	if n == 0 {
		return 0
	}
	v, _ := binary.Varint(r.b[r.off:])
	r.off += n
	return v
}

// count reads an entry count and refuses one that the bytes left could not
// hold, so a corrupt count cannot drive a huge loop or allocation.
func (r *reader) count(what string) int {
	n := r.uvarint(what + " count")
	if r.err != nil {
		return 0
	}
	if left := len(r.b) - r.off; n > uint64(left/minEntry) {
		r.fail("%s count %d exceeds what the %d bytes left can hold", what, n, left)
		return 0
	}
	return int(n)
}

// bytes reads a length-prefixed byte string as a sub-slice of the input,
// capped so that appending to it cannot overwrite what follows.
func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if left := len(r.b) - r.off; n > uint64(left) {
		r.fail("%s length %d exceeds the %d bytes left", what, n, left)
		return nil
	}
	end := r.off + int(n)
	p := r.b[r.off:end:end]
	r.off = end
	return p
}
