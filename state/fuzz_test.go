package state

import (
	"bytes"
	"testing"
)

// FuzzDecode checks that Decode never panics and that whatever it accepts
// re-encodes to the same bytes. Each input is also tried with a valid
// checksum, so that mutations reach the parser behind the CRC.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sampleSnapshot()))
	f.Add(Encode(&Snapshot{}))
	f.Add(Encode(snap(3, 9)))
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(b []byte) {
			s, err := Decode(b)
			if err != nil {
				return
			}
			if got := Encode(s); !bytes.Equal(got, b) {
				t.Fatalf("Encode(Decode(b)) != b\n   b %x\ngot %x", b, got)
			}
		}
		check(b)
		if len(b) >= crcSize {
			check(reseal(b))
		}
	})
}
