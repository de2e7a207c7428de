// Package prefetch starts loads of memory that a goroutine will read soon,
// so that their cache misses overlap with its work until then instead of
// stalling it one after another. It is a hint: it changes no memory, never
// faults, and does nothing on architectures without an implementation.
package prefetch
