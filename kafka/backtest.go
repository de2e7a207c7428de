package kafka

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/replay"
	"github.com/vigil-cep/vigil/rules"
)

// DefaultBacktestEvents bounds how many retained input records a backtest
// over the topics reads.
const DefaultBacktestEvents = 1_000_000

// Backtest runs a candidate ruleset document next to the running version
// over events (NDJSON in the replay format) or, when events is nil, over the
// records the input topics retain (at most maxEvents, oldest first), each on
// a copy of the state: live tasks are not touched.
func (s *Service) Backtest(ctx context.Context, candidate []byte, events []byte, maxEvents, samples int) (*service.BacktestReport, error) {
	cand, err := rules.Load(candidate)
	if err != nil {
		return nil, err
	}
	cur := s.Ruleset()
	if events == nil {
		if events, err = s.retained(ctx, cur, maxEvents); err != nil {
			return nil, err
		}
	}
	return replay.Backtest(ctx, cur, cand, events, samples, replay.Config{Decoders: 1})
}

// retained reads the input topics from their start to their current end
// and writes them as replay lines in event order (record timestamp, then
// topic, partition and offset).
func (s *Service) retained(ctx context.Context, rs *rules.Ruleset, maxEvents int) ([]byte, error) {
	if maxEvents <= 0 {
		maxEvents = DefaultBacktestEvents
	}
	inputs := InputTopics(rs)
	starts, err := s.adm.ListStartOffsets(ctx, inputs...)
	if err != nil {
		return nil, err
	}
	// Committed records only, as the tasks read them under exactly-once
	// (the decision API's events of an aborted transaction are no input),
	// up to the last stable offset.
	ends, err := s.adm.ListCommittedOffsets(ctx, inputs...)
	if err != nil {
		return nil, err
	}
	from := make(map[string]map[int32]kgo.Offset)
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		st, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Err != nil || o.Offset <= st.Offset {
			return
		}
		if from[o.Topic] == nil {
			from[o.Topic] = make(map[int32]kgo.Offset)
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(st.Offset)
		left++
	})
	streamOf := make(map[string]string)
	for _, st := range rs.Streams {
		if st.Input() {
			streamOf[st.Topic] = st.Name
		}
	}
	type line struct {
		ts, off int64
		topic   string
		part    int32
		text    []byte
	}
	var lines []line
	if left > 0 {
		// Markers are kept to see a partition read to its end when its
		// last stable offset follows one.
		cl, err := s.client(kgo.ConsumePartitions(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		done := make(map[string]map[int32]bool)
		for left > 0 && len(lines) < maxEvents {
			fs := cl.PollFetches(rctx)
			if err := rctx.Err(); err != nil {
				return nil, fmt.Errorf("reading the input topics: %w", err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				end, _ := ends.Lookup(r.Topic, r.Partition)
				if !r.Attrs.IsControl() && r.Offset < end.Offset && len(lines) < maxEvents && json.Valid(r.Value) {
					b := append([]byte(`{"stream":`), strconv.Quote(streamOf[r.Topic])...)
					b = append(append(b, `,"partition":`...), strconv.Itoa(int(r.Partition))...)
					b = append(append(b, `,"timestamp":`...), strconv.FormatInt(r.Timestamp.UnixMilli(), 10)...)
					b = append(append(append(b, `,"value":`...), r.Value...), '}', '\n')
					lines = append(lines, line{r.Timestamp.UnixMilli(), r.Offset, r.Topic, r.Partition, b})
				}
				if r.Offset >= end.Offset-1 {
					if done[r.Topic] == nil {
						done[r.Topic] = make(map[int32]bool)
					}
					if !done[r.Topic][r.Partition] {
						done[r.Topic][r.Partition] = true
						left--
					}
				}
			})
		}
	}
	slices.SortFunc(lines, func(a, b line) int {
		return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part), cmp.Compare(a.off, b.off))
	})
	var out bytes.Buffer
	for _, l := range lines {
		out.Write(l.text)
	}
	return out.Bytes(), nil
}
