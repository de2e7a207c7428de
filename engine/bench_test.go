package engine

import (
	"bytes"
	"os"
	"testing"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/rules"
)

// BenchmarkProcess measures the task alone on pre-decoded records: the single
// goroutine that replay and the service both run per task. (BenchmarkReplay,
// in package replay, measures the whole replay.)
func BenchmarkProcess(b *testing.B) {
	rs, recs := processBenchInput(b)
	benchmarkProcess(b, rs, recs)
}

// BenchmarkProcessFieldReads is BenchmarkProcess with one more rule, in
// shadow, that reads a field of past events in a general expression (not a
// native query): history builds that rule's rows at each evaluation.
func BenchmarkProcessFieldReads(b *testing.B) {
	_, recs := processBenchInput(b)
	doc, err := os.ReadFile("../examples/fraud.yaml")
	if err != nil {
		b.Fatal(err)
	}
	doc = append(doc, `
  other_ip:
    stream: transactions
    action: review
    mode: shadow
    when: 'any(history("transactions", "5m"), .ip != ip)'
`...)
	rs, err := rules.Load(doc)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkProcess(b, rs, recs)
}

func benchmarkProcess(b *testing.B, rs *rules.Ruleset, recs []Record) {
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
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkProcessCheckpointed is BenchmarkProcess on a tracked task that
// takes a checkpoint every 2,500 events (a cut, its records encoded, the
// delta assembled), as a task does every 100 ms under exactly-once at
// 25k events/s: what checkpoints cost per event.
func BenchmarkProcessCheckpointed(b *testing.B) {
	const every = 2_500
	rs, recs := processBenchInput(b)
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
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// processBenchInput is the input of the Process benchmarks: the standard
// workload's 100k events for 10k users, decoded for examples/fraud.yaml.
func processBenchInput(b *testing.B) (*rules.Ruleset, []Record) {
	var in bytes.Buffer
	if _, err := workload.Generate(&in, workload.Config{Users: 10_000, Events: 100_000, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	rs := loadRuleset(b, "../examples/fraud.yaml")
	names := streamNames(rs)
	var recs []Record
	for i, line := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		recs = append(recs, testLine(string(line), int64(i+1), names))
	}
	return rs, recs
}
