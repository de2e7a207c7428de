package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDeliveryConfigs: phase 3 runs each --delivery once per run, in
// alternating order, exactly-once at the first commit interval; phase 4 runs
// at-least-once once and exactly-once at every interval; every
// configuration has a suffix of its own.
func TestDeliveryConfigs(t *testing.T) {
	c := benchConfig{deliveries: []string{"at-least-once", "exactly-once"}, commitIntervals: []time.Duration{100 * time.Millisecond, time.Second},
		checkpoints: "dir"}
	alo, eos := atLeastOnce("dir"), exactlyOnce(100*time.Millisecond)
	if got := c.throughputConfigs(); !slices.Equal(got, []deliveryConfig{alo, eos}) {
		t.Errorf("phase 3: %+v", got)
	}
	if got := runOrder(c.throughputConfigs(), 1); !slices.Equal(got, []deliveryConfig{eos, alo}) {
		t.Errorf("phase 3, second run: %+v, want exactly-once first", got)
	}
	if got := runOrder(c.throughputConfigs(), 2); !slices.Equal(got, []deliveryConfig{alo, eos}) {
		t.Errorf("phase 3, third run: %+v, want at-least-once first", got)
	}
	lat := c.latencyConfigs()
	if !slices.Equal(lat, []deliveryConfig{alo, eos, exactlyOnce(time.Second)}) {
		t.Errorf("phase 4: %+v", lat)
	}
	suffixes := map[string]bool{}
	for _, d := range lat {
		suffixes[d.suffix()] = true
	}
	if len(suffixes) != len(lat) || !suffixes[".eos-1000ms"] || !suffixes[".alo-dir"] {
		t.Errorf("suffixes %v", suffixes)
	}
	if eos.checkpoints != "kafka" || eos.baseEvery != 600 || profileKey(phaseKafka, eos) != "kafka-exactly-once" || profileKey(phaseLatency, alo) != "latency" {
		t.Errorf("exactly-once %+v, profile keys %q %q", eos, profileKey(phaseKafka, eos), profileKey(phaseLatency, alo))
	}
}

func TestDeliveryRatio(t *testing.T) {
	run := func(rate float64) *benchKafka {
		return &benchKafka{benchThroughput: benchThroughput{EventsPerSec: rate}}
	}
	alo := []*benchKafka{run(100), run(200), run(400)}
	eos := []*benchKafka{run(90), run(100), run(200)}
	r := ratio(alo, eos)
	if !slices.Equal(r.Runs, []float64{0.9, 0.5, 0.5}) || r.MedianOfRuns != 0.5 || r.MedianRun != 0.5 || r.Goal != 0.7 {
		t.Errorf("ratio %+v", r)
	}
	if ratio(alo, nil) != nil || ratio(nil, eos) != nil {
		t.Error("a ratio without both deliveries")
	}
}

// TestStableOffsetsPastAll: the moment the decisions were visible is the
// first poll past every partition's last decision, and a decision no poll
// saw visible is an error.
func TestStableOffsetsPastAll(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := &stableOffsetWatcher{topic: "d", history: map[int32][]offsetSeen{
		0: {{at(10), 5}, {at(20), 9}},
		1: {{at(15), 3}, {at(30), 8}, {at(40), 12}},
	}}
	// The last decisions: partition 0 at offset 7 (visible at 20), 1 at 7
	// (at 30); commit markers took the offsets in between.
	got, err := w.pastAll(map[int32]int64{0: 7, 1: 7})
	if err != nil || !got.Equal(at(30)) {
		t.Errorf("pastAll = %v, %v; want %v", got, err, at(30))
	}
	if got := w.firstVisible(); !got.Equal(at(10)) {
		t.Errorf("firstVisible = %v, want %v", got, at(10))
	}
	if _, err := w.pastAll(map[int32]int64{0: 9}); err == nil || !strings.Contains(err.Error(), "partition 0: the record at offset 9 was not visible") {
		t.Errorf("offset 9 of partition 0, never visible: %v", err)
	}
	if _, err := w.pastAll(map[int32]int64{2: 0}); err == nil {
		t.Error("a partition never polled above 0: no error")
	}
}

func TestCheckDecided(t *testing.T) {
	w := &decisionWatcher{seen: map[string]idSeen{"a": {n: 1}, "b": {n: 2}}}
	if err := checkDecided(map[string]int{"a": 1, "b": 2}, w); err != nil {
		t.Error(err)
	}
	err := checkDecided(map[string]int{"a": 1, "b": 1, "c": 1}, w)
	if err == nil || !strings.Contains(err.Error(), "2 tx ids not decided once per transaction record") ||
		!strings.Contains(err.Error(), "b: 2 decisions for 1 transaction records") || !strings.Contains(err.Error(), "c: 0 decisions") {
		t.Errorf("a duplicate and a missing decision: %v", err)
	}
	w.seen["x"] = idSeen{n: 1}
	if err := checkDecided(map[string]int{"a": 1, "b": 2}, w); err == nil || !strings.Contains(err.Error(), "x: 1 decisions, not a tx_id of the workload") {
		t.Errorf("a decision for no transaction: %v", err)
	}
}
