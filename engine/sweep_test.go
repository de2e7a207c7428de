package engine

import (
	"slices"
	"testing"

	"github.com/vigil-cep/vigil/stream"
)

// TestSweepQueue: a key is dropped once the horizon has passed the whole
// bucket of its last event time, and only then; a key touched later is not
// dropped through its older, stale entry; extreme times neither overflow nor
// get lost.
func TestSweepQueue(t *testing.T) {
	const m = sweepEvery
	type touch struct {
		key string
		ts  int64
	}
	for _, tc := range []struct {
		name    string
		touches []touch
		horizon int64
		dropped []string
	}{
		{"nothing before the horizon", []touch{{"a", 5}}, stream.MinTime, nil},
		{"the bucket must end before the horizon", []touch{{"a", 5}}, m - 1, nil},
		{"bucket [0, m) ends before m", []touch{{"a", 5}, {"b", m - 1}}, m, []string{"a", "b"}},
		{"a later event keeps the key", []touch{{"a", 5}, {"b", 7}, {"a", m + 3}}, m, []string{"b"}},
		{"later buckets wait", []touch{{"a", 5}, {"b", m}, {"c", 3 * m}}, 2 * m, []string{"a", "b"}},
		{"an earlier time does not move the key back", []touch{{"a", 2 * m}, {"a", 5}}, m, nil},
		{"negative times", []touch{{"a", -1}, {"b", -m - 1}}, 0, []string{"b", "a"}},
		// The last bucket, ending at MaxTime, never comes due: that is the end of time.
		{"extremes", []touch{{"a", stream.MinTime}, {"b", stream.MaxTime - m}}, stream.MaxTime, []string{"a", "b"}},
		{"the earliest time is listed too", []touch{{"a", stream.MinTime}}, stream.MinTime + m, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q sweepQueue
			keys := map[string]*keyState{}
			for _, to := range tc.touches {
				ks, ok := keys[to.key]
				if !ok {
					ks = &keyState{key: to.key, lastTime: stream.MinTime}
					keys[to.key] = ks
				}
				q.touch(ks, to.ts)
			}
			var got []string
			q.due(tc.horizon, func(ks *keyState) { got = append(got, ks.key) })
			if !slices.Equal(got, tc.dropped) {
				t.Fatalf("dropped %q, want %q", got, tc.dropped)
			}
			// Dropped keys are not dropped again; the rest go at the end of time.
			var rest []string
			q.due(stream.MaxTime, func(ks *keyState) { rest = append(rest, ks.key) })
			for k := range keys {
				if slices.Contains(got, k) == slices.Contains(rest, k) {
					t.Errorf("key %s dropped %v then %v: want exactly once", k, slices.Contains(got, k), slices.Contains(rest, k))
				}
			}
		})
	}
}
