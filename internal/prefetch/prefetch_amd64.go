package prefetch

import "unsafe"

// Line starts loading the cache line that holds the byte at p.
//
//go:noescape
func Line(p unsafe.Pointer)

// Range starts loading the cache lines that hold the n bytes at p. They may
// reach past the object at p: a prefetch reads nothing and never faults.
//
//go:noescape
func Range(p unsafe.Pointer, n uintptr)
