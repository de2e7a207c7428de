package engine

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
)

// TestReplayDeterministic is Must show 4: replaying the same input twice gives
// the same bytes, whatever the number of decoder goroutines, with the input
// spread over partitions (one task each, running in parallel).
func TestReplayDeterministic(t *testing.T) {
	var in bytes.Buffer
	cfg := workload.Config{Users: 2000, Events: 60_000, Seed: 7, Partitions: 3}
	if testing.Short() {
		cfg = workload.Config{Users: 500, Events: 10_000, Seed: 7, Partitions: 3}
	}
	if _, err := workload.Generate(&in, cfg); err != nil {
		t.Fatal(err)
	}
	rs := loadRuleset(t, "../examples/fraud.yaml")
	run := func(decoders int) ([]byte, Stats) {
		var out bytes.Buffer
		st, err := Replay(context.Background(), rs, bytes.NewReader(in.Bytes()), &out, ReplayConfig{Decoders: decoders})
		if err != nil {
			t.Fatal(err)
		}
		return out.Bytes(), st
	}
	first, st := run(1)
	if st.Decisions == 0 || st.WindowResults == 0 {
		t.Fatalf("the workload produced no decisions or windows: %+v", st)
	}
	for _, decoders := range []int{1, 4} {
		again, _ := run(decoders)
		if !bytes.Equal(first, again) {
			t.Fatalf("replay with %d decoders differs from the first run (%d vs %d bytes)", decoders, len(again), len(first))
		}
	}
	if got := st.Records; got != int64(cfg.Events) {
		t.Errorf("replayed %d records, want %d", got, cfg.Events)
	}
}

// TestPartitionsDecideAlike: keyed state is per key, so spreading the keys
// over partitions (tasks) changes the order of outputs, never a decision.
func TestPartitionsDecideAlike(t *testing.T) {
	rs := loadRuleset(t, "../examples/fraud.yaml")
	decisions := func(partitions int) []string {
		var in, out bytes.Buffer
		if _, err := workload.Generate(&in, workload.Config{Users: 1000, Events: 20_000, Seed: 11, Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		if _, err := Replay(context.Background(), rs, &in, &out, ReplayConfig{}); err != nil {
			t.Fatal(err)
		}
		var ds []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `"kind":"decision"`) {
				ds = append(ds, l)
			}
		}
		slices.Sort(ds)
		return ds
	}
	one, four := decisions(1), decisions(4)
	if len(one) == 0 || !slices.Equal(one, four) {
		t.Fatalf("decisions differ between 1 and 4 partitions (%d and %d)", len(one), len(four))
	}
}
