package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// Errors of the request API (the REST layer maps them to statuses).
var (
	ErrNotFound   = errors.New("not found")
	ErrIDConflict = errors.New("the id was decided with another body")
	ErrSaturated  = errors.New("the task's request queue is full")
	ErrNotOwner   = errors.New("another instance owns this key's partition")
	ErrNotDecided = errors.New("not a stream with decisions")
	ErrPending    = errors.New("the decision waits for the watermark")
	ErrBadEvent   = errors.New("the event cannot be read")
)

// originAPI marks input records the decision API wrote.
var originAPI = kgo.RecordHeader{Key: "vigil-origin", Value: []byte("api")}

func fromAPI(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == originAPI.Key && string(h.Value) == string(originAPI.Value) {
			return true
		}
	}
	return false
}

// apiDecide is one decision request in flight: done once the decision and
// the event are both acknowledged by the broker.
type apiDecide struct {
	id       string
	decision []byte
	features map[string]map[string]any
	acks     sync.WaitGroup
	failed   atomic.Pointer[error]
}

func (r *apiDecide) ack(err error) {
	if err != nil {
		r.failed.CompareAndSwap(nil, &err)
	}
	r.acks.Done()
}

// DecideResult is the answer to a decision request.
type DecideResult struct {
	Decision []byte
	Replay   bool // the id was known: the stored decision
	// Features holds, per matched rule, the values of what its condition
	// compares (explainability), as the first answer for the id gave them
	// (a replay included); nil when no rule matched, or when the id was
	// decided from its input topic rather than through Decide.
	Features map[string]map[string]any
}

// Decide evaluates one event of a decided stream at once against the state
// of the task owning its key (docs/design.md "Decision API"): the event
// counts in that state, is written to its input topic and its decision to
// the decisions topic, and the result returns once the broker has
// acknowledged both, so a crash can neither lose an event whose decision was
// returned nor decide it differently on replay. A known id returns the
// stored decision (Replay) with the features of the first answer; the same
// id with another body is ErrIDConflict, and so is an id that another task of
// this instance holds (engine.IDIndex: the guarantee does not reach the tasks
// of other instances).
func (s *Service) Decide(ctx context.Context, streamName string, body []byte) (res *DecideResult, err error) {
	start := time.Now()
	defer func() {
		if err == nil {
			s.cfg.Metrics.DecisionLatency("api", time.Since(start))
		}
	}()
	rs := s.Ruleset()
	st := findStream(rs, streamName)
	if st == nil || st.Decide == rules.DecideNever || !st.HasID || !st.Input() {
		return nil, fmt.Errorf("%w: %q", ErrNotDecided, streamName)
	}
	x, err := s.extractor(rs)
	if err != nil {
		return nil, err
	}
	rec := engine.Record{Stream: st.Index, StreamName: st.Topic, Topic: st.Topic, Value: string(body),
		Timestamp: time.Now().UnixMilli(), HasTimestamp: true, Offset: -1, Now: true}
	x.Extract(&rec)
	s.putExtractor(x) // at once: the request may wait long for the broker
	if rec.Err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadEvent, rec.Err)
	}
	if !rec.HasID {
		return nil, fmt.Errorf("%w: it has no id (stream %s)", ErrBadEvent, st.Name)
	}
	part := partitionOf(rec.Key, s.counts[st.Topic])
	rec.Partition = part
	t, err := s.local(ctx, part)
	if err != nil {
		return nil, err
	}
	type answer struct {
		res *DecideResult
		req *apiDecide
		err error
	}
	reply := make(chan answer, 1)
	call := func() {
		if t.rs != rs {
			t.applySwitch() // a version published a moment ago: switch now, between events
		}
		if t.rs != rs {
			reply <- answer{err: fmt.Errorf("%w: the ruleset changed, retry", ErrSaturated)}
			return
		}
		if d, crc, pending, ok := t.eng.Lookup(st.Index, rec.ID); ok {
			switch {
			case crc != engine.BodyCRC(rec.Value) || t.eng.IDConflict(st.Index, rec.ID, rec.Key) != nil:
				reply <- answer{err: ErrIDConflict}
			case pending:
				reply <- answer{err: ErrPending}
			default:
				reply <- answer{res: &DecideResult{Decision: d, Replay: true,
					Features: features(t.eng.Features(st.Index, rec.ID))}}
			}
			return
		}
		if err := t.eng.IDConflict(st.Index, rec.ID, rec.Key); err != nil {
			// Another task of this instance holds the id
			// (engine.IDIndex): another transaction, not a repeat.
			reply <- answer{err: fmt.Errorf("%w: %w", ErrIDConflict, err)}
			return
		}
		if t.enr != nil {
			if err := t.enr.Enrich(ctx, []*engine.Record{&rec}); err != nil {
				reply <- answer{err: err}
				return
			}
		}
		req := &apiDecide{id: rec.ID}
		t.capture = req
		t.eng.Explain()
		t.eng.Process(&rec)
		t.eng.Explained()
		t.capture = nil
		if errors.As(rec.Err, new(*engine.IDConflictError)) {
			// Claimed by another task since IDConflict above.
			reply <- answer{err: fmt.Errorf("%w: %w", ErrIDConflict, rec.Err)}
			return
		}
		// The features as the task keeps them, which a repeat of this
		// request gets too.
		req.features = features(t.eng.Features(st.Index, rec.ID))
		// The event itself, on its input partition, marked so that the
		// task, reading it back with the id already known, re-emits
		// nothing (after a restore from before it, it is processed).
		req.acks.Add(1)
		t.inflight.Add(1)
		t.s.cl.Produce(context.Background(), &kgo.Record{Topic: st.Topic, Partition: part, Key: []byte(rec.Key), Value: body,
			Headers: []kgo.RecordHeader{originAPI}},
			func(_ *kgo.Record, err error) {
				defer t.inflight.Done()
				req.ack(err)
			})
		reply <- answer{req: req}
	}
	select {
	case t.calls <- call:
	default:
		return nil, ErrSaturated
	}
	var a answer
	select {
	case a = <-reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.err != nil || a.res != nil {
		return a.res, a.err
	}
	acked := make(chan struct{})
	go func() { a.req.acks.Wait(); close(acked) }()
	select {
	case <-acked:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := a.req.failed.Load(); err != nil {
		return nil, fmt.Errorf("not recorded: %w", *err)
	}
	if a.req.decision == nil {
		return nil, errors.New("the event produced no decision") // a DLQ'd event: rec.Err was nil, so a rule run error
	}
	return &DecideResult{Decision: a.req.decision, Features: a.req.features}, nil
}

// features decodes what engine.Task.Features returns.
func features(b []byte) map[string]map[string]any {
	if b == nil {
		return nil
	}
	v, err := jsonv.Decode(string(b))
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		return nil
	}
	out := make(map[string]map[string]any, len(m))
	for rule, f := range m {
		if f, ok := f.(map[string]any); ok {
			out[rule] = f
		}
	}
	return out
}

// Decision returns the decision of id held by one of this instance's tasks.
func (s *Service) Decision(ctx context.Context, id string) ([]byte, error) {
	rs := s.Ruleset()
	for _, t := range s.taskList() {
		found := make(chan []byte, 1)
		call := func() {
			for _, st := range rs.Streams {
				if d, _, pending, ok := t.eng.Lookup(st.Index, id); ok && !pending && t.rs == rs {
					found <- d
					return
				}
			}
			found <- nil
		}
		select {
		case t.calls <- call:
		default:
			return nil, ErrSaturated
		}
		select {
		case d := <-found:
			if d != nil {
				return d, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, ErrNotFound
}

// EntityView is what the owning task holds about a key, and how fresh it is.
type EntityView struct {
	*engine.EntityView
	Task      int32  `json:"task"`
	LagMillis int64  `json:"lag_ms"`   // processing time minus the task watermark
	Instance  string `json:"instance"` // this instance's API address (Config.AdvertiseHTTP)
}

// Entity returns the owning task's view of key. The key's partition is
// computed as producers keyed by it place it (Kafka's murmur2 partitioner).
func (s *Service) Entity(ctx context.Context, key string, q engine.EntityQuery) (*EntityView, error) {
	rs := s.Ruleset()
	inputs := InputTopics(rs)
	part := partitionOf(key, s.counts[inputs[0]])
	t, err := s.local(ctx, part)
	if err != nil {
		return nil, err
	}
	got := make(chan *engine.EntityView, 1)
	select {
	case t.calls <- func() { got <- t.eng.Entity(key, q) }:
	default:
		return nil, ErrSaturated
	}
	select {
	case v := <-got:
		lag := int64(0)
		if v.Watermark > 0 {
			lag = time.Now().UnixMilli() - v.Watermark
		}
		return &EntityView{EntityView: v, Task: part, LagMillis: lag, Instance: s.cfg.AdvertiseHTTP}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Ready reports whether the service has joined its group and runs.
func (s *Service) Ready() error {
	if !s.joined.Load() {
		return errors.New("not yet assigned partitions")
	}
	if err := s.failed.Load(); err != nil {
		return *err
	}
	if stuck := s.stuck.Load(); stuck != nil {
		return errors.New(*stuck)
	}
	return nil
}

func (s *Service) task(p int32) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[p]
}

func (s *Service) taskList() []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t)
	}
	return out
}

// extractor returns an Extractor for rs from the pool (building one binds
// every expression of the ruleset: too slow per request).
func (s *Service) extractor(rs *rules.Ruleset) (*pooledExtractor, error) {
	for {
		select {
		case x := <-s.extractors:
			if x.rs == rs {
				return x, nil
			}
			continue // an extractor of an older version: let it go
		default:
		}
		break
	}
	x, err := engine.NewExtractor(rs)
	if err != nil {
		return nil, err
	}
	return &pooledExtractor{x, rs}, nil
}

// putExtractor returns x to the pool, which keeps a few (unlike a
// sync.Pool, which a collection empties).
func (s *Service) putExtractor(x *pooledExtractor) {
	select {
	case s.extractors <- x:
	default:
	}
}

type pooledExtractor struct {
	*engine.Extractor
	rs *rules.Ruleset
}

func findStream(rs *rules.Ruleset, name string) *rules.Stream {
	for _, st := range rs.Streams {
		if st.Name == name {
			return st
		}
	}
	return nil
}

// partitionOf is where Kafka's default partitioner places a record keyed by
// key (murmur2, as the Java client and franz-go do), so the API routes a key
// to the task that producers keyed by it feed.
func partitionOf(key string, partitions int32) int32 {
	if partitions <= 0 {
		return 0
	}
	return int32(murmur2([]byte(key))&0x7fffffff) % partitions
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 computes it.
func murmur2(b []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
