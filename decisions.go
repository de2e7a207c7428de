package vigil

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reading the decisions topic for GET /v1/decisions.
const (
	// recentScan is how many of the newest records of each partition of
	// the decisions topic RecentDecisions looks through.
	recentScan = 1000
	// recentWait bounds how long RecentDecisions waits for those records;
	// past it, it answers with what it has read.
	recentWait = 2 * time.Second
)

// RecentDecisions reads the decisions topic, the record
// of every instance's decisions: it looks through the newest recentScan
// records of each partition (q.Limit without filters) and returns those q
// selects, newest first (by record time, then partition and offset). Each call reads with a client
// of its own, closed before it returns, so that nothing runs between calls
// and the decision path shares nothing with it.
func (s *Service) RecentDecisions(ctx context.Context, q DecisionQuery) ([]json.RawMessage, int, error) {
	if len(s.cfg.Kafka.Brokers) == 0 {
		return nil, 0, fmt.Errorf("%w: recent decisions need the decisions topic, and this service was given no Kafka client configuration for it", ErrUnavailable)
	}
	topic := s.decisionsTopic()
	opts, err := s.cfg.Kafka.Opts()
	if err != nil {
		return nil, 0, fmt.Errorf("kafka client for %s: %w", topic, err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, 0, fmt.Errorf("kafka client for %s: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list the start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list the end offsets of %s: %w", topic, err)
	}
	// Unfiltered, the newest q.Limit decisions are among the newest q.Limit
	// of each partition: no need to read more (a console tailing every two
	// seconds reads a few records, not thousands).
	depth := int64(recentScan)
	if q.Action == "" && q.Rule == "" {
		depth = int64(min(q.Limit, recentScan))
	}
	from := make(map[int32]kgo.Offset)
	last := make(map[int32]int64) // the last offset to read, per partition still being read
	ends.Each(func(o kadm.ListedOffset) {
		lo := max(o.Offset-depth, 0)
		if st, ok := starts.Lookup(topic, o.Partition); ok {
			lo = max(lo, st.Offset)
		}
		if lo < o.Offset {
			from[o.Partition] = kgo.NewOffset().At(lo)
			last[o.Partition] = o.Offset - 1
		}
	})
	if len(from) == 0 {
		return []json.RawMessage{}, 0, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})

	type hit struct {
		ts   time.Time
		part int32
		off  int64
		rec  json.RawMessage
	}
	var hits []hit
	scanned := 0
	wctx, cancel := context.WithTimeout(ctx, recentWait)
	defer cancel()
	for len(last) > 0 {
		fs := cl.PollFetches(wctx)
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		if wctx.Err() != nil {
			break // what was read is the answer: a partition with a gap at its end (compaction) never reaches it
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = cmp.Or(ferr, err)
			}
		})
		if ferr != nil {
			return nil, 0, fmt.Errorf("read %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, reading := last[r.Partition]
			if !reading || r.Offset > end {
				return // written since the offsets were listed
			}
			if r.Offset == end {
				delete(last, r.Partition)
			}
			scanned++
			if json.Valid(r.Value) && q.Selects(r.Value) {
				hits = append(hits, hit{ts: r.Timestamp, part: r.Partition, off: r.Offset, rec: r.Value})
			}
		})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(b.ts.Compare(a.ts), cmp.Compare(a.part, b.part), cmp.Compare(b.off, a.off))
	})
	out := make([]json.RawMessage, 0, min(len(hits), q.Limit))
	for _, h := range hits[:min(len(hits), q.Limit)] {
		out = append(out, h.rec)
	}
	return out, scanned, nil
}
