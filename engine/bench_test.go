package engine

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
)

// BenchmarkReplay replays a vigil gen workload through examples/fraud.yaml;
// ns/op divided by the events is the cost of one event end to end (decode,
// history, windows, rules, encode), with allocations per run.
func BenchmarkReplay(b *testing.B) {
	var in bytes.Buffer
	const events = 100_000
	if _, err := workload.Generate(&in, workload.Config{Users: 10_000, Events: events, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	rs := loadRuleset(b, "../examples/fraud.yaml")
	b.SetBytes(int64(in.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Replay(context.Background(), rs, bytes.NewReader(in.Bytes()), io.Discard, ReplayConfig{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkProcess measures the task alone on pre-decoded records: the single
// goroutine that replay and the service both run per task.
func BenchmarkProcess(b *testing.B) {
	var in bytes.Buffer
	const events = 100_000
	if _, err := workload.Generate(&in, workload.Config{Users: 10_000, Events: events, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	rs := loadRuleset(b, "../examples/fraud.yaml")
	names := map[string]int{}
	for i, st := range rs.Streams {
		names[st.Name] = i
	}
	var items []item
	for i, line := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		items = append(items, parseLine(string(line), int64(i+1), names))
	}
	b.ReportAllocs()
	for b.Loop() {
		task, err := NewTask(rs, func(Output) {})
		if err != nil {
			b.Fatal(err)
		}
		for i := range items {
			rec := items[i].rec
			task.process(&rec)
		}
		task.Finish()
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
