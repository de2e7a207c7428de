package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

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
func benchState(b testing.TB, rs *rules.Ruleset, users int) *Task {
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

// BenchmarkCut measures an incremental checkpoint (Cut, Step, Cut.Bytes) at
// 10k, 100k and 1M keys after 1% of the users sent their events again since
// the previous cut: the task's pause to mark the cut (cut-ns), the longest slice
// of records Step encodes between batches with a 500 µs budget
// (max-step-ns), the delta's size and its share of a full snapshot.
func BenchmarkCut(b *testing.B) {
	rs := loadRuleset(b, "../examples/fraud.yaml")
	for _, users := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", users), func(b *testing.B) {
			task := benchState(b, rs, users)
			full, err := task.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			task.Track()
			names := streamNames(rs)
			// The events of the first 1% of the users, from the workload
			// that built the state, sent again later: the same users with
			// the same cards, devices and addresses, so that their decisions
			// are what the state's are, under transaction ids of their own.
			var again []map[string]any
			for _, line := range benchLines(b, workload.Config{Users: users, Events: 3 * users, Seed: 1}) {
				var rec map[string]any
				if err := json.Unmarshal(line, &rec); err != nil {
					b.Fatal(err)
				}
				v := rec["value"].(map[string]any)
				if u, _ := strconv.Atoi(strings.TrimPrefix(v["user_id"].(string), "u")); u <= users/100 {
					again = append(again, rec)
				}
			}
			span := int64(3*users) * 1000 / int64(workload.DefaultRate)
			var cutNS, stepNS, size, keys float64
			next, round := 0, 0
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				round++
				for _, rec := range again {
					v := maps.Clone(rec["value"].(map[string]any))
					v["ts"] = v["ts"].(float64) + float64(round*int(span)+round*10_000)
					if id, ok := v["tx_id"].(string); ok {
						v["tx_id"] = fmt.Sprintf("r%d-%s", round, id)
					}
					line, err := json.Marshal(map[string]any{"stream": rec["stream"], "value": v})
					if err != nil {
						b.Fatal(err)
					}
					next++
					rec := testLine(string(line), int64(3*users+next), names)
					task.process(&rec)
				}
				b.StartTimer()
				start := time.Now()
				c, err := task.Cut()
				if err != nil {
					b.Fatal(err)
				}
				cutNS = max(cutNS, float64(time.Since(start)))
				for {
					start := time.Now()
					done := task.Step(500 * time.Microsecond)
					stepNS = max(stepNS, float64(time.Since(start)))
					if done {
						break
					}
				}
				delta, err := c.Bytes()
				if err != nil {
					b.Fatal(err)
				}
				size, keys = float64(len(delta)), float64(c.Keys())
			}
			b.ReportMetric(cutNS, "cut-ns")
			b.ReportMetric(stepNS, "max-step-ns")
			b.ReportMetric(keys, "delta-keys")
			b.ReportMetric(size, "delta-bytes")
			b.ReportMetric(100*size/float64(len(full)), "delta/full-%")
		})
	}
}

// benchLines returns the lines of a workload.
func benchLines(b *testing.B, c workload.Config) [][]byte {
	b.Helper()
	var in bytes.Buffer
	if _, err := workload.Generate(&in, c); err != nil {
		b.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n"))
}

// BenchmarkRestoreChain measures what issue 17's restore bar asks: a state
// of 1M users spread over four tasks, each saved as a base and 20 deltas
// (1% of its users touched in each), restored by four fresh tasks at once,
// as a process restores the tasks it is given. The time per op is the
// wall time until all four are ready.
func BenchmarkRestoreChain(b *testing.B) {
	const tasks, deltas = 4, 20
	users := 1_000_000 / tasks
	rs := loadRuleset(b, "../examples/fraud.yaml")
	task := benchState(b, rs, users)
	base, err := task.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	task.Track()
	chain := [][]byte{base}
	names := streamNames(rs)
	again := benchLines(b, workload.Config{Users: users, Events: 3 * users, Seed: 1})
	size := len(base)
	for round := 1; round <= deltas; round++ {
		for i, line := range again[(round-1)*len(again)/100 : round*len(again)/100] {
			line = bytes.Replace(line, []byte(`"tx_id":"t`), fmt.Appendf(nil, `"tx_id":"r%d-`, round), 1)
			rec := testLine(string(line), int64(3*users+round*len(again)+i), names)
			task.process(&rec)
		}
		c, err := task.Cut()
		if err != nil {
			b.Fatal(err)
		}
		task.Step(0)
		delta, err := c.Bytes()
		if err != nil {
			b.Fatal(err)
		}
		chain = append(chain, delta)
		size += len(delta)
	}
	b.ResetTimer()
	for b.Loop() {
		errs := make(chan error, tasks)
		for range tasks {
			go func() {
				t, err := NewTask(rs, func(Output) {})
				if err == nil {
					err = t.RestoreChain(chain)
				}
				errs <- err
			}()
		}
		for range tasks {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(size), "chain-bytes/task")
	b.ReportMetric(float64(task.Stats().Keys), "keys/task")
}
