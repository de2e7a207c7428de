package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// originAPI marks input records the decision API wrote; apiHeaders is the
// headers of each, shared (the client only reads them).
var (
	originAPI  = kgo.RecordHeader{Key: "vigil-origin", Value: []byte("api")}
	apiHeaders = []kgo.RecordHeader{originAPI}
)

func fromAPI(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == originAPI.Key && string(h.Value) == string(originAPI.Value) {
			return true
		}
	}
	return false
}

// Decide evaluates one event of a decided stream at once against the state
// of the task owning its key (docs/design.md "Decision API"): the event
// counts in that state, is written to its input topic and its decision to
// the decisions topic, both at once, and the result returns once the broker
// has acknowledged both, so a crash can neither lose an event whose decision
// was returned nor decide it differently on replay. A known id returns the
// stored decision (replay) with the features of the first answer; the same
// id with another body is service.ErrIDConflict, and so is an id that
// another task of this instance holds (engine.IDIndex: the guarantee does
// not reach the tasks of other instances). Under exactly-once both are
// written in the task's transaction, and the result returns once it has
// committed (docs/design.md "Exactly-once").
//
// A request that read the running ruleset version just before a new one was
// published (a rule saved, or quarantined) is tried again with the new one,
// a few times, rather than answered "saturated".
func (s *Service) Decide(ctx context.Context, streamName string, body []byte) (d *service.Decision, replay bool, err error) {
	start := time.Now()
	for range rulesetRetries {
		if d, replay, err = s.decide(ctx, streamName, body); !errors.Is(err, errRulesetMoved) {
			break
		}
	}
	if err == nil {
		s.cfg.Metrics.DecisionLatency("api", time.Since(start))
	}
	return d, replay, err
}

// rulesetRetries bounds how often a decision is tried again because the
// ruleset changed under it: versions are published seconds apart at most,
// so a third change within one request means something else is wrong.
const rulesetRetries = 3

// errRulesetMoved is the answer of a task that runs another ruleset version
// than the one a request read.
var errRulesetMoved = fmt.Errorf("%w: the ruleset changed, retry", service.ErrSaturated)

func (s *Service) decide(ctx context.Context, streamName string, body []byte) (d *service.Decision, replay bool, err error) {
	rs := s.Ruleset()
	st := findStream(rs, streamName)
	if st == nil || st.Decide == rules.DecideNever || !st.HasID || !st.Input() {
		return nil, false, fmt.Errorf("%w: %q", service.ErrNotDecided, streamName)
	}
	// The key is read here, off the task, to find the task.
	x, err := s.extractor(rs)
	if err != nil {
		return nil, false, err
	}
	rec := engine.Record{Stream: st.Index, StreamName: st.Topic, Topic: st.Topic, Value: string(body),
		Timestamp: time.Now().UnixMilli(), HasTimestamp: true, Offset: -1}
	x.Extract(&rec)
	s.putExtractor(x) // at once: the request may wait long for the broker
	if rec.Err != nil {
		return nil, false, fmt.Errorf("%w: %w", service.ErrBadEvent, rec.Err)
	}
	part := partitionOf(rec.Key, s.counts[st.Topic])
	rec.Partition = part
	t, err := s.local(ctx, part)
	if err != nil {
		return nil, false, err
	}
	type answer struct {
		d      *engine.Decided
		acks   chan error  // the broker's answers for the event and the decision; nil when nothing was written
		commit *txnOutcome // under exactly-once, the transaction they were written in
		err    error
	}
	reply := make(chan answer, 1)
	call := func() {
		if t.rs != rs {
			t.applySwitch() // a version published a moment ago: switch now, between events
		}
		if t.rs != rs {
			reply <- answer{err: errRulesetMoved}
			return
		}
		t.work.decides++ // the state may change: see checkpoint
		if t.enr != nil {
			if err := t.enr.Enrich(ctx, []*engine.Record{&rec}); err != nil {
				reply <- answer{err: err}
				return
			}
		}
		d, err := t.eng.Decide(&rec)
		if err != nil || d.Replay {
			// Under exactly-once a replay too waits for the open
			// transaction: the first answer may be in it, or in the one
			// committing before it.
			reply <- answer{d: d, err: err, commit: t.outcomes[t.gen]}
			return
		}
		// The event, on its input partition, marked so that the task,
		// reading it back with the id already known, re-emits nothing
		// (after a restore from before it, it is processed), and its
		// decision: produced together, awaited together.
		gen := t.gen
		a := answer{d: d, acks: make(chan error, 2), commit: t.outcomes[gen]}
		wg := &t.inflight[gen]
		wg.Add(2)
		cl := t.producer(gen)
		cl.Produce(context.Background(), &kgo.Record{Topic: st.Topic, Partition: part, Key: []byte(rec.Key), Value: body,
			Headers: apiHeaders}, func(r *kgo.Record, err error) {
			if err == nil {
				t.own.add(r.Topic, r.Offset)
			}
			a.acks <- err
			wg.Done()
		})
		t.observe(d.Output)
		cl.Produce(context.Background(), t.outRecord(d.Output, new(kgo.Record)), func(r *kgo.Record, err error) {
			a.acks <- err
			t.acked(r, gen, err) // how far our decisions partition is written
		})
		reply <- a
	}
	select {
	case t.calls <- call:
	default:
		return nil, false, service.ErrSaturated
	}
	a, err := await(ctx, t, reply)
	if err != nil {
		return nil, false, err
	}
	if a.err != nil {
		return nil, false, a.err
	}
	for range cap(a.acks) { // 0 when nothing was written (a replay)
		select {
		case err := <-a.acks:
			if err != nil {
				return nil, false, fmt.Errorf("not recorded: %w", err)
			}
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if a.commit != nil {
		// Exactly-once: the decision is answered once it is visible to
		// read_committed consumers, at the task's next checkpoint.
		if err := a.commit.wait(ctx); err != nil {
			return nil, false, fmt.Errorf("not recorded: %w", err)
		}
	}
	return &service.Decision{Record: a.d.Output.Value, Features: features(a.d.Features)}, a.d.Replay, nil
}

// features decodes what engine.Decided.Features holds.
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

// Decision returns the decision of id held by one of this instance's
// tasks, with the features its matched rules read when the decision API
// made it.
func (s *Service) Decision(ctx context.Context, id string) (*service.Decision, error) {
	rs := s.Ruleset()
	for _, t := range s.taskList() {
		found := make(chan *service.Decision, 1)
		call := func() {
			if d, f, ok := t.eng.Decision(id); ok && t.rs == rs {
				found <- &service.Decision{Record: d, Features: features(f)}
				return
			}
			found <- nil
		}
		select {
		case t.calls <- call:
		default:
			return nil, service.ErrSaturated
		}
		d, err := await(ctx, t, found)
		if err != nil {
			return nil, err
		}
		if d != nil {
			return d, nil
		}
	}
	return nil, service.ErrNotFound
}

// Entity returns the owning task's view of key. The key's partition is
// computed as producers keyed by it place it (Kafka's murmur2 partitioner).
func (s *Service) Entity(ctx context.Context, key string, q service.EntityQuery) (*service.Entity, error) {
	rs := s.Ruleset()
	inputs := InputTopics(rs)
	part := partitionOf(key, s.counts[inputs[0]])
	t, err := s.local(ctx, part)
	if err != nil {
		return nil, err
	}
	got := make(chan *service.Entity, 1)
	select {
	case t.calls <- func() { got <- t.eng.Entity(key, q) }:
	default:
		return nil, service.ErrSaturated
	}
	v, err := await(ctx, t, got)
	if err != nil {
		return nil, err
	}
	if v.Watermark > 0 {
		v.LagMillis = time.Now().UnixMilli() - v.Watermark
	}
	v.Task, v.Instance = part, s.cfg.AdvertiseHTTP
	return v, nil
}

// await waits for the answer of a call sent to t's queue. A task that ends
// without running the call (it stopped: its partition moved, or the
// service is stopping) answers that no instance owns its partition now,
// which the API turns into a 503 to retry.
func await[T any](ctx context.Context, t *task, reply <-chan T) (T, error) {
	var zero T
	select {
	case v := <-reply:
		return v, nil
	case <-t.done:
		select {
		case v := <-reply: // it ran the call before it ended
			return v, nil
		default:
			return zero, &service.NotOwnerError{Partition: t.part}
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Ready reports whether the service has joined its group and runs.
func (s *Service) Ready() error {
	if err := s.failed.Load(); err != nil {
		return *err
	}
	if s.stopping.Load() {
		return errors.New("stopping")
	}
	if !s.joined.Load() {
		return errors.New("not yet assigned partitions")
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
