package replay

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
		if _, err := Run(context.Background(), rs, bytes.NewReader(in.Bytes()), io.Discard, Config{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
