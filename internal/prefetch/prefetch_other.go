//go:build !amd64

package prefetch

import "unsafe"

// Line does nothing on this architecture.
func Line(p unsafe.Pointer) {}

// Range does nothing on this architecture.
func Range(p unsafe.Pointer, n uintptr) {}
