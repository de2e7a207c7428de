package replay

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
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
	run := func(decoders int) ([]byte, engine.Stats) {
		var out bytes.Buffer
		st, err := Run(context.Background(), rs, bytes.NewReader(in.Bytes()), &out, Config{Decoders: decoders})
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
		if _, err := Run(context.Background(), rs, &in, &out, Config{}); err != nil {
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

// TestDecodeFieldsChangeNothing: decoding only the fields a stream's
// expressions read (rules.Stream.DecodeFields), into slots, gives the same
// bytes as decoding every field into a map, in replay and on the task's own
// decoding path (records that reach Process undecoded, as the service hands
// them).
func TestDecodeFieldsChangeNothing(t *testing.T) {
	var in bytes.Buffer
	if _, err := workload.Generate(&in, workload.Config{Users: 500, Events: 10_000, Seed: 3, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	filtered := loadRuleset(t, "../examples/fraud.yaml")
	whole := loadRuleset(t, "../examples/fraud.yaml")
	some := false
	for _, st := range whole.Streams {
		some = some || st.DecodeFields != nil
		st.DecodeFields = nil
	}
	if !some {
		t.Fatal("the example ruleset decodes every field of every stream: this test checks nothing")
	}
	replay := func(rs *rules.Ruleset) []byte {
		var out bytes.Buffer
		if _, err := Run(context.Background(), rs, bytes.NewReader(in.Bytes()), &out, Config{}); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	if a, b := replay(filtered), replay(whole); !bytes.Equal(a, b) {
		t.Fatalf("replay differs with DecodeFields (%d bytes) and without (%d bytes)", len(a), len(b))
	}
	process := func(rs *rules.Ruleset) []byte {
		var out bytes.Buffer
		task, err := engine.NewTask(rs, func(o engine.Output) { out.Write(o.Value); out.WriteByte('\n') })
		if err != nil {
			t.Fatal(err)
		}
		x, err := engine.NewExtractor(rs)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]int{}
		for i, st := range rs.Streams {
			names[st.Name] = i
		}
		for i, line := range strings.Split(strings.TrimSpace(in.String()), "\n") {
			var it engine.Record
			parseLine(&it, line, int64(i+1), names, x)
			rec := engine.Record{Stream: it.Stream, StreamName: it.StreamName, Partition: it.Partition,
				Offset: it.Offset, Value: it.Value} // undecoded: Process extracts it
			task.Process([]*engine.Record{&rec})
		}
		task.Finish()
		return out.Bytes()
	}
	if a, b := process(filtered), process(whole); !bytes.Equal(a, b) {
		t.Fatalf("Process differs with DecodeFields (%d bytes) and without (%d bytes)", len(a), len(b))
	}
}
