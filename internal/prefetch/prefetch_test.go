package prefetch

import (
	"testing"
	"unsafe"
)

// TestPrefetch runs the hints over the edges they must survive: a nil
// pointer, an empty range, a range that starts inside a line, and one that
// runs past the end of its object.
func TestPrefetch(t *testing.T) {
	b := make([]byte, 200)
	Line(nil)
	Line(unsafe.Pointer(&b[0]))
	Range(nil, 0)
	Range(unsafe.Pointer(&b[3]), 0)
	Range(unsafe.Pointer(&b[3]), 197)
	Range(unsafe.Pointer(&b[199]), 4096)
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d changed to %d", i, c)
		}
	}
}
