package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
)

// BenchmarkSnapshot measures what a checkpoint costs the task today, at 10k,
// 100k and 1M keys (issue 17's cut is measured against it): the whole state
// encoded on the task's goroutine, which holds the task for the time per op.
// The state is the example ruleset over the standard workload with that
// many users, three events per user. Run it with -benchtime=3x: building the
// 1M-key state takes longer than the snapshots.
func BenchmarkSnapshot(b *testing.B) {
	rs := loadRuleset(b, "../examples/fraud.yaml")
	names := streamNames(rs)
	for _, users := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", users), func(b *testing.B) {
			var in bytes.Buffer
			if _, err := workload.Generate(&in, workload.Config{Users: users, Events: 3 * users, Seed: 1}); err != nil {
				b.Fatal(err)
			}
			task, err := NewTask(rs, func(Output) {})
			if err != nil {
				b.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n"))
			in = bytes.Buffer{}
			for i, line := range lines {
				rec := testLine(string(line), int64(i+1), names)
				task.process(&rec)
			}
			keys := task.Stats().Keys
			var size int
			b.ResetTimer()
			for b.Loop() {
				snap, err := task.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				size = len(snap)
			}
			b.ReportMetric(float64(keys), "keys")
			b.ReportMetric(float64(size), "snapshot-bytes")
		})
	}
}
