package state

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func sampleSnapshot() *Snapshot {
	return &Snapshot{
		Task:   7,
		Seq:    42,
		Parent: 41,
		Offsets: map[string]int64{
			"payments/7":         1234,
			"logins/7":           99,
			"vigil.decisions/7":  500,
			"negative-allowed/7": -1,
		},
		Sections: map[string][]byte{
			"history":    []byte("history bytes"),
			"windows":    {0, 1, 2, 3, 255},
			"watermarks": {},
			"dedup":      bytes.Repeat([]byte{0xab}, 300),
		},
	}
}

func TestRoundTrip(t *testing.T) {
	cases := map[string]*Snapshot{
		"sample": sampleSnapshot(),
		"empty":  {},
		"base":   {Task: 1, Seq: 1},
		"extremes": {
			Task:     math.MaxInt32,
			Seq:      math.MaxUint64,
			Parent:   math.MaxUint64 - 1,
			Offsets:  map[string]int64{"": math.MinInt64, "a": math.MaxInt64},
			Sections: map[string][]byte{"": nil, "big": bytes.Repeat([]byte("x"), 1<<20)},
		},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(Encode(s))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if got.Offsets == nil || got.Sections == nil {
				t.Errorf("Decode returned nil maps: %+v", got)
			}
		})
	}
}

// goldenSnapshot is the snapshot of the golden encodings, with Parent 8.
func goldenSnapshot() *Snapshot {
	return &Snapshot{
		Task:     3,
		Seq:      9,
		Parent:   8,
		Offsets:  map[string]int64{"t/3": 5},
		Sections: map[string][]byte{"w": {0xee}, "h": {1, 2}},
	}
}

// golden seals the hex body with its CRC-32C, computed independently of the
// package.
func golden(t *testing.T, hexBody string) []byte {
	t.Helper()
	body, err := hex.DecodeString(hexBody)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

const (
	goldenTail = "01" + "03742f33" + "0a" + // 1 offset: "t/3" = 5, zigzag
		"02" + "0168" + "02" + "0102" + "0177" + "01" + "ee" // 2 sections: "h", "w"
	// goldenV2 is goldenSnapshot in version 2.
	goldenV2 = "564947494c434b50" + // magic "VIGILCKP"
		"02" + // version
		"06" + // task 3, zigzag
		"09" + // seq
		"08" + // parent
		goldenTail
	// goldenV1 is goldenSnapshot without its Parent in version 1, as the
	// build before deltas wrote it.
	goldenV1 = "564947494c434b50" + // magic "VIGILCKP"
		"01" + // version
		"06" + // task 3, zigzag
		"09" + // seq
		goldenTail
)

// TestEncodeGolden pins the format: a change here is a format change and
// needs a new FormatVersion.
func TestEncodeGolden(t *testing.T) {
	want := golden(t, goldenV2)
	got := Encode(goldenSnapshot())
	if !bytes.Equal(got, want) {
		t.Errorf("Encode =\n%x\nwant\n%x", got, want)
	}
	s, err := Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(goldenSnapshot(), s); diff != "" {
		t.Errorf("Decode of the golden file (-want +got):\n%s", diff)
	}
}

// TestDecodeVersion1 checks that a file of the previous format still
// decodes, as a base, and re-encodes in the current one.
func TestDecodeVersion1(t *testing.T) {
	v1 := golden(t, goldenV1)
	s, err := Decode(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenSnapshot()
	want.Parent = 0
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Decode of a version 1 file (-want +got):\n%s", diff)
	}
	// Encode writes it in version 2, with parent 0.
	v2 := golden(t, "564947494c434b50"+"02"+"06"+"09"+"00"+goldenTail)
	if got := Encode(s); !bytes.Equal(got, v2) {
		t.Errorf("Encode of a version 1 snapshot =\n%x\nwant\n%x", got, v2)
	}
	if got := encodeVersion(s, 1); !bytes.Equal(got, v1) {
		t.Errorf("encodeVersion(1) =\n%x\nwant\n%x", got, v1)
	}
}

func TestEncodeDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	build := func() *Snapshot {
		s := &Snapshot{Task: 1, Seq: 2, Offsets: map[string]int64{}, Sections: map[string][]byte{}}
		for _, i := range rng.Perm(200) {
			s.Offsets[fmt.Sprintf("topic-%d/1", i)] = int64(i)
			s.Sections[fmt.Sprintf("section-%d", i)] = []byte(fmt.Sprint(i))
		}
		return s
	}
	want := Encode(build())
	for range 20 {
		if got := Encode(build()); !bytes.Equal(got, want) {
			t.Fatal("Encode differs between equal snapshots built in different orders")
		}
	}
}

// reseal replaces b's checksum with a valid one, so that a test reaches the
// checks after it.
func reseal(b []byte) []byte {
	body := b[:len(b)-crcSize]
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

func sealed(hexBody string) []byte {
	b, err := hex.DecodeString(hexBody)
	if err != nil {
		panic(err)
	}
	return reseal(append(b, 0, 0, 0, 0))
}

func TestDecodeErrors(t *testing.T) {
	valid := Encode(sampleSnapshot())
	flipped := bytes.Clone(valid)
	flipped[20] ^= 0xff
	const hdr = "564947494c434b5002"   // magic, version 2
	const hdrV1 = "564947494c434b5001" // magic, version 1
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "state: corrupt checkpoint: not a checkpoint (bad magic header)"},
		{"bad magic", append([]byte("VIGILCKQ"), valid[8:]...), "state: corrupt checkpoint: not a checkpoint (bad magic header)"},
		{"no version", []byte(magic), "state: corrupt checkpoint: version: truncated at byte 8"},
		{"version 3", append([]byte(magic), 3, 0, 0, 0, 0, 0), "state: checkpoint format version 3 is not supported (this build reads versions 1 to 2)"},
		{"version 0", append([]byte(magic), 0), "state: checkpoint format version 0 is not supported (this build reads versions 1 to 2)"},
		{"huge version", append([]byte(magic), 0x80, 1), "state: checkpoint format version 128 is not supported (this build reads versions 1 to 2)"},
		{"no checksum", append([]byte(magic), 2, 0, 0), "state: corrupt checkpoint: truncated: 11 bytes"},
		{"flipped byte", flipped, "state: corrupt checkpoint: checksum mismatch: computed " +
			fmt.Sprintf("%08x", crc32.Checksum(flipped[:len(flipped)-4], castagnoli)) + ", stored " +
			fmt.Sprintf("%08x", binary.LittleEndian.Uint32(flipped[len(flipped)-4:]))},
		{"body truncated", sealed(hdr + "06"), "state: corrupt checkpoint: seq: truncated at byte 10"},
		{"no parent", sealed(hdr + "06" + "09"), "state: corrupt checkpoint: parent: truncated at byte 11"},
		{"non-minimal varint", sealed(hdr + "8600" + "00" + "00" + "00" + "00"), "state: corrupt checkpoint: task: non-minimal varint at byte 9"},
		{"varint overflow", sealed(hdr + "00" + "ffffffffffffffffff7f"), "state: corrupt checkpoint: seq: varint overflows 64 bits at byte 10"},
		{"non-minimal parent", sealed(hdr + "00" + "01" + "8100" + "00" + "00"), "state: corrupt checkpoint: parent: non-minimal varint at byte 11"},
		{"parent overflow", sealed(hdr + "00" + "01" + "ffffffffffffffffff7f"), "state: corrupt checkpoint: parent: varint overflows 64 bits at byte 11"},
		{"task out of range", sealed(hdr + "8080808010" + "00" + "00" + "00" + "00"), "state: corrupt checkpoint: task 2147483648 out of int32 range"},
		{"huge count", sealed(hdr + "00" + "00" + "00" + "ffffffff0f"), "state: corrupt checkpoint: offsets count 4294967295 exceeds what the 0 bytes left can hold"},
		{"huge length", sealed(hdr + "00" + "00" + "00" + "00" + "01" + "00" + "ffffffffffffffff7f"), "state: corrupt checkpoint: section  length 9223372036854775807 exceeds the 0 bytes left"},
		{"unsorted offsets", sealed(hdr + "00" + "00" + "00" + "02" + "016202" + "016102" + "00"), `state: corrupt checkpoint: offset "a" not after "b"`},
		{"duplicate section", sealed(hdr + "00" + "00" + "00" + "00" + "02" + "016100" + "016100"), `state: corrupt checkpoint: section "a" not after "a"`},
		{"trailing bytes", sealed(hdr + "00" + "00" + "00" + "00" + "00" + "0000"), "state: corrupt checkpoint: 2 trailing bytes"},
		// Version 1 has no parent: the byte after seq is the offsets count.
		{"v1 huge count", sealed(hdrV1 + "00" + "00" + "ffffffff0f"), "state: corrupt checkpoint: offsets count 4294967295 exceeds what the 0 bytes left can hold"},
		{"v1 trailing bytes", sealed(hdrV1 + "00" + "00" + "00" + "00" + "00"), "state: corrupt checkpoint: 1 trailing bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Decode(tc.in)
			if err == nil {
				t.Fatalf("Decode = %+v, want error %q", s, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Decode error\n got %q\nwant %q", err, tc.want)
			}
			var ve *VersionError
			if !errors.Is(err, ErrCorrupt) && !errors.As(err, &ve) {
				t.Errorf("error %v is neither ErrCorrupt nor *VersionError", err)
			}
		})
	}
}

func TestDecodeUnknownVersion(t *testing.T) {
	b := Encode(sampleSnapshot())
	b[len(magic)] = FormatVersion + 1
	_, err := Decode(reseal(b))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Version != FormatVersion+1 {
		t.Fatalf("Decode = %v, want *VersionError{%d}", err, FormatVersion+1)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Errorf("a version error should not claim corruption: %v", err)
	}
}

func TestDecodeTruncated(t *testing.T) {
	b := Encode(sampleSnapshot())
	for n := range len(b) {
		if s, err := Decode(b[:n]); err == nil {
			t.Fatalf("Decode of %d/%d bytes = %+v, want error", n, len(b), s)
		}
	}
}

func TestDecodeSectionsDoNotOverlap(t *testing.T) {
	s, err := Decode(Encode(&Snapshot{Sections: map[string][]byte{"a": {1}, "b": {2}}}))
	if err != nil {
		t.Fatal(err)
	}
	_ = append(s.Sections["a"], 9)
	if got := s.Sections["b"]; !bytes.Equal(got, []byte{2}) {
		t.Errorf("appending to section a changed section b to %v", got)
	}
}
