package state

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecode checks that Decode never panics and that whatever it accepts
// re-encodes to the same bytes: by Encode for a version 2 input, in version
// 1 for a version 1 input (which decodes as a base, and whose Encode
// decodes back to the same snapshot). Each input is also tried with a valid
// checksum, so that mutations reach the parser behind the CRC.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sampleSnapshot()))
	f.Add(Encode(&Snapshot{}))
	f.Add(Encode(snap(3, 9)))
	f.Add(Encode(delta(3, 10, 9)))
	f.Add(encodeVersion(sampleSnapshot(), 1))
	f.Add(encodeVersion(snap(3, 9), 1))
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(b []byte) {
			s, err := Decode(b)
			if err != nil {
				return
			}
			// Decode read a one-byte version: 1 or 2.
			switch version := b[len(magic)]; version {
			case FormatVersion:
				if got := Encode(s); !bytes.Equal(got, b) {
					t.Fatalf("Encode(Decode(b)) != b\n   b %x\ngot %x", b, got)
				}
			case 1:
				if s.Parent != 0 {
					t.Fatalf("version 1 input decoded with Parent %d", s.Parent)
				}
				if got := encodeVersion(s, 1); !bytes.Equal(got, b) {
					t.Fatalf("encodeVersion(Decode(b), 1) != b\n   b %x\ngot %x", b, got)
				}
				s2, err := Decode(Encode(s))
				if err != nil {
					t.Fatalf("Decode(Encode(Decode(b))) = %v", err)
				}
				if diff := cmp.Diff(s, s2); diff != "" {
					t.Fatalf("version 1 input re-encoded decodes differently (-first +second):\n%s", diff)
				}
			default:
				t.Fatalf("Decode accepted version byte %d", version)
			}
		}
		check(b)
		if len(b) >= crcSize {
			check(reseal(b))
		}
	})
}
