package vigil

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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

// RecentDecisions reads the decisions topic, the record of every
// instance's decisions: it looks through the newest recentScan records of
// each partition (q.Limit without filters) and returns those q selects,
// newest first (by record time, then partition and offset).
//
// It reads what is committed: under exactly-once a decision is visible
// once its transaction commits, and one that a crash aborted never is (a
// topic without transactions reads the same either way).
//
// It reads with a client of its own, apart from the decision path's, opened
// at the first call and kept until Run returns: a console polls every two
// seconds, and on a secured cluster a client per call was a TLS handshake
// and a SASL exchange per poll. Calls take turns on it.
func (s *Service) RecentDecisions(ctx context.Context, q DecisionQuery) ([]json.RawMessage, int, error) {
	if len(s.cfg.Kafka.Brokers) == 0 {
		return nil, 0, fmt.Errorf("%w: recent decisions need the decisions topic, and this service was given no Kafka client configuration for it", ErrUnavailable)
	}
	topic := s.decisionsTopic()
	r := &s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, 0, fmt.Errorf("%w: the service has stopped", ErrUnavailable)
	}
	if r.cl == nil {
		opts, err := s.cfg.Kafka.Opts()
		if err != nil {
			return nil, 0, fmt.Errorf("kafka client for %s: %w", topic, err)
		}
		// Control records (transaction markers) are kept so that a
		// partition whose last stable offset follows a marker is seen
		// read to its end.
		opts = append(opts, kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords())
		if r.cl, err = kgo.NewClient(opts...); err != nil {
			return nil, 0, fmt.Errorf("kafka client for %s: %w", topic, err)
		}
	}
	cl := r.cl
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list the start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic) // the last stable offsets
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
	first := make(map[int32]int64) // the first offset to read, per partition
	last := make(map[int32]int64)  // the last offset to read, per partition still being read
	ends.Each(func(o kadm.ListedOffset) {
		lo := max(o.Offset-depth, 0)
		if st, ok := starts.Lookup(topic, o.Partition); ok {
			lo = max(lo, st.Offset)
		}
		if lo < o.Offset {
			from[o.Partition] = kgo.NewOffset().At(lo)
			first[o.Partition], last[o.Partition] = lo, o.Offset-1
		}
	})
	if len(from) == 0 {
		return []json.RawMessage{}, 0, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	// Stop fetching once answered: the next call asks for other offsets,
	// and what is buffered for these goes with them.
	parts := slices.Collect(maps.Keys(from))
	defer cl.RemoveConsumePartitions(map[string][]int32{topic: parts})

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
			if !reading || r.Offset > end || r.Offset < first[r.Partition] {
				return // written since the offsets were listed, or left from an earlier call's fetch
			}
			if r.Offset == end {
				delete(last, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
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

// recentReader is RecentDecisions' client: opened at the first call, closed
// when the service stops. mu is held for a whole call.
type recentReader struct {
	mu     sync.Mutex
	cl     *kgo.Client
	closed bool
}

// close closes the client, and refuses the calls after.
func (r *recentReader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cl != nil {
		r.cl.Close()
	}
	r.cl, r.closed = nil, true
}
