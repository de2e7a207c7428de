//go:build race

package engine

// raceEnabled: the race detector slows single-goroutine tests tenfold and
// finds nothing in them; the longest run shorter inputs under it.
const raceEnabled = true
