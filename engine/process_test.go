package engine

import (
	"fmt"
	"reflect"
	"testing"
)

// TestProcessControlAndArrival: a driver feeds a task through Process alone.
// A control record raises the watermark as RaiseWatermark does, counts as no
// record, and is left as it was (replay hands one to every task at once);
// with ArrivalTime, the records' Arrival is the processing time that lets a
// silent input go idle, and without it no input goes idle. Outputs carry the
// index of the record that caused them.
func TestProcessControlAndArrival(t *testing.T) {
	rs := mustLoad(t, `
streams:
  a: {key: k, time: ts, watermark: {max_out_of_order: 0s, idle_after: 100ms}}
  b: {key: k, time: ts, watermark: {max_out_of_order: 0s, idle_after: 100ms}}
windows:
  wa: {stream: a, tumbling: 10ms, aggregate: {n: count()}}
`)
	type fired struct {
		index int
		value string
	}
	run := func(opts ...Option) ([]fired, Stats, bool) {
		var got []fired
		task, err := NewTask(rs, func(o Output) { got = append(got, fired{o.Index, string(o.Value)}) }, opts...)
		if err != nil {
			t.Fatal(err)
		}
		task.ExpectInput(0, 0)
		task.ExpectInput(1, 0)
		event := func(stream int, ts, arrival int64) *Record {
			return &Record{Stream: stream, StreamName: rs.Streams[stream].Name, Arrival: arrival,
				Value: fmt.Sprintf(`{"k":"x","ts":%d}`, ts)}
		}
		ctl := &Record{Control: true, Stream: -1, Partition: -1, Watermark: 100, Arrival: 1200}
		before := *ctl
		task.Process([]*Record{
			event(0, 1, 1000),
			event(1, 5, 1000),
			event(0, 30, 1050), // b silent for 50ms: it holds the watermark at 5
			event(0, 40, 1200), // b silent for 200ms: idle, with arrival time
			ctl,
		})
		return got, task.Stats(), reflect.DeepEqual(*ctl, before)
	}

	got, st, same := run(ArrivalTime(1000))
	want := []fired{
		{3, `{"kind":"window","window":"wa","key":"x","start":0,"end":10,"values":{"n":1},"update":false}`},
		{3, `{"kind":"window","window":"wa","key":"x","start":30,"end":40,"values":{"n":1},"update":false}`},
		{4, `{"kind":"window","window":"wa","key":"x","start":40,"end":50,"values":{"n":1},"update":false}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with ArrivalTime: outputs\n%v\nwant\n%v", got, want)
	}
	if st.Records != 4 || !same {
		t.Errorf("with ArrivalTime: %d records counted (want 4); control record left as it was: %v", st.Records, same)
	}

	got, _, _ = run() // no processing time: b holds the watermark until the control record
	want = []fired{
		{4, `{"kind":"window","window":"wa","key":"x","start":0,"end":10,"values":{"n":1},"update":false}`},
		{4, `{"kind":"window","window":"wa","key":"x","start":30,"end":40,"values":{"n":1},"update":false}`},
		{4, `{"kind":"window","window":"wa","key":"x","start":40,"end":50,"values":{"n":1},"update":false}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("without ArrivalTime: outputs\n%v\nwant\n%v", got, want)
	}
}
