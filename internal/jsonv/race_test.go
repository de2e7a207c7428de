//go:build race

package jsonv

const raceEnabled = true
