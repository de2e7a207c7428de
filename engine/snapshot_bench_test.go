package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
)

// BenchmarkSnapshot measures what a checkpoint costs the task today, at 10k,
// 100k and 1M keys (issue 17's cut is measured against it): the whole state
// encoded on the task's goroutine, which holds the task for the time per op.
// The state is the example ruleset over the standard workload with that
// many users, three events per user. Run it with -benchtime=3x: building the
// 1M-key state takes longer than the snapshots.
func BenchmarkSnapshot(b *testing.B) {
	rs := loadRuleset(b, "../examples/fraud.yaml")
	for _, users := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", users), func(b *testing.B) {
			task := benchState(b, rs, users)
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

// BenchmarkRestore is BenchmarkSnapshot's other half: a fresh task restoring
// the snapshot, as a task does when it starts (the service's tasks restore
// in parallel, one per partition).
func BenchmarkRestore(b *testing.B) {
	rs := loadRuleset(b, "../examples/fraud.yaml")
	for _, users := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", users), func(b *testing.B) {
			snap, err := benchState(b, rs, users).Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				task, err := NewTask(rs, func(Output) {})
				if err != nil {
					b.Fatal(err)
				}
				if err := task.Restore(snap); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(snap)), "snapshot-bytes")
		})
	}
}

// benchState returns a task holding the state of the example ruleset over
// the standard workload with that many users, three events each.
func benchState(b *testing.B, rs *rules.Ruleset, users int) *Task {
	b.Helper()
	var in bytes.Buffer
	if _, err := workload.Generate(&in, workload.Config{Users: users, Events: 3 * users, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	task, err := NewTask(rs, func(Output) {})
	if err != nil {
		b.Fatal(err)
	}
	names := streamNames(rs)
	for i, line := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		rec := testLine(string(line), int64(i+1), names)
		task.process(&rec)
	}
	return task
}
