package engine

import (
	"bytes"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
)

// BenchmarkProcess measures the task alone on pre-decoded records: the single
// goroutine that replay and the service both run per task. (BenchmarkReplay,
// in package replay, measures the whole replay.)
func BenchmarkProcess(b *testing.B) {
	var in bytes.Buffer
	const events = 100_000
	if _, err := workload.Generate(&in, workload.Config{Users: 10_000, Events: events, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	rs := loadRuleset(b, "../examples/fraud.yaml")
	names := streamNames(rs)
	var recs []Record
	for i, line := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		recs = append(recs, testLine(string(line), int64(i+1), names))
	}
	b.ReportAllocs()
	for b.Loop() {
		task, err := NewTask(rs, func(Output) {})
		if err != nil {
			b.Fatal(err)
		}
		for i := range recs {
			rec := recs[i]
			task.process(&rec)
		}
		task.Finish()
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkProcessCheckpointed is BenchmarkProcess on a tracked task that
// takes a checkpoint every 2,500 events (a cut, its records encoded, the
// delta assembled), as a task does every 100 ms under exactly-once at
// 25k events/s: what checkpoints cost per event.
func BenchmarkProcessCheckpointed(b *testing.B) {
	var in bytes.Buffer
	const events, every = 100_000, 2_500
	if _, err := workload.Generate(&in, workload.Config{Users: 10_000, Events: events, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	rs := loadRuleset(b, "../examples/fraud.yaml")
	names := streamNames(rs)
	var recs []Record
	for i, line := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		recs = append(recs, testLine(string(line), int64(i+1), names))
	}
	b.ReportAllocs()
	for b.Loop() {
		task, err := NewTask(rs, func(Output) {})
		if err != nil {
			b.Fatal(err)
		}
		task.Track()
		for i := range recs {
			rec := recs[i]
			task.process(&rec)
			if (i+1)%every == 0 {
				c, err := task.Cut()
				if err != nil {
					b.Fatal(err)
				}
				task.Step(0)
				if _, err := c.Bytes(); err != nil {
					b.Fatal(err)
				}
			}
		}
		task.Finish()
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
