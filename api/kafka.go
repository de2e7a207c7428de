package api

import (
	"context"
	"errors"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// ServiceBackend serves the API from the running Kafka service.
type ServiceBackend struct {
	S *kafka.Service
	// Kafka is how RecentDecisions reaches the cluster (the service's own
	// kafka.Config.Kafka), and DecisionsTopic the topic it reads (default
	// kafka.DefaultTopics.Decisions). Without Kafka, GET /v1/decisions is
	// 503.
	Kafka          kconf.Config
	DecisionsTopic string
}

var _ Backend = ServiceBackend{}

func version(v *kafka.RulesetVersion) *Version {
	return &Version{Number: v.Number, Digest: v.Digest, Document: []byte(v.Document), Time: v.Time,
		Change: Change{Author: v.Author, Comment: v.Comment}}
}

// Ruleset implements Backend.
func (b ServiceBackend) Ruleset(context.Context) (*Version, error) {
	v := b.S.Current()
	if v == nil {
		return nil, ErrNotFound
	}
	return version(v), nil
}

// Versions implements Backend.
func (b ServiceBackend) Versions(context.Context) ([]*Version, error) {
	vs := b.S.Versions()
	out := make([]*Version, len(vs))
	for i, v := range vs {
		out[i] = version(v)
	}
	return out, nil
}

// Version implements Backend.
func (b ServiceBackend) Version(_ context.Context, n int64) (*Version, error) {
	vs := b.S.Versions()
	if n < 1 || n > int64(len(vs)) {
		return nil, ErrNotFound
	}
	return version(vs[n-1]), nil
}

// Publish implements Backend.
func (b ServiceBackend) Publish(ctx context.Context, doc []byte, expect int64, c Change) (*Version, error) {
	v, err := b.S.Publish(ctx, doc, expect, c.Author, c.Comment)
	if errors.Is(err, kafka.ErrVersionConflict) {
		return nil, ErrVersionConflict
	}
	if tl := (*kafka.RulesetTooLargeError)(nil); errors.As(err, &tl) {
		return nil, &TooLargeError{Limit: tl.Limit, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return version(v), nil
}

// Decide implements Backend.
func (b ServiceBackend) Decide(ctx context.Context, stream string, body []byte) (*Decision, bool, error) {
	res, err := b.S.Decide(ctx, stream, body)
	if err != nil {
		return nil, false, mapError(err)
	}
	return &Decision{Record: res.Decision, Features: res.Features}, res.Replay, nil
}

// Decision implements Backend.
func (b ServiceBackend) Decision(ctx context.Context, id string) (*Decision, error) {
	d, err := b.S.Decision(ctx, id)
	if err != nil {
		return nil, mapError(err)
	}
	return &Decision{Record: d}, nil
}

// Entity implements Backend.
func (b ServiceBackend) Entity(ctx context.Context, key string, q EntityQuery) (*Entity, error) {
	v, err := b.S.Entity(ctx, key, engine.EntityQuery{Limit: q.Limit, Before: q.Before, Stream: q.Stream})
	if err != nil {
		return nil, mapError(err)
	}
	return &Entity{Key: v.Key, History: v.History, Windows: v.Windows, Partials: v.Partials,
		Decisions: v.Decisions, Watermark: v.Watermark, LagMillis: v.LagMillis, Task: v.Task, Instance: v.Instance}, nil
}

// Backtest implements Backend.
func (b ServiceBackend) Backtest(ctx context.Context, candidate, events []byte, limit int) (*BacktestReport, error) {
	r, err := b.S.Backtest(ctx, candidate, events, 0, limit)
	if err != nil {
		return nil, err
	}
	return &BacktestReport{Events: r.Events, Decisions: r.Decisions, Hits: r.Hits, NewHits: r.NewHits,
		Changed: r.Changed, ChangedByAction: r.ChangedByAction, Samples: r.Samples}, nil
}

// Ready implements Backend.
func (b ServiceBackend) Ready(context.Context) error { return b.S.Ready() }

// mapError turns the service's errors into the API's.
func mapError(err error) error {
	if no, ok := errors.AsType[*kafka.NotOwnerError](err); ok {
		return errors.Join(&NotOwnerError{Owner: no.Owner}, err)
	}
	for _, m := range []struct{ from, to error }{
		{kafka.ErrNotFound, ErrNotFound}, {kafka.ErrIDConflict, ErrIDConflict}, {kafka.ErrSaturated, ErrSaturated},
		{kafka.ErrPending, ErrSaturated}, {kafka.ErrNotOwner, ErrNotOwner}, {kafka.ErrBadEvent, ErrBadEvent},
		{kafka.ErrNotDecided, ErrBadEvent},
	} {
		if errors.Is(err, m.from) {
			return errors.Join(m.to, err)
		}
	}
	return err
}
