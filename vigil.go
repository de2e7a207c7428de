// Package vigil is Vigil embedded in a Go program: the fraud-rules engine
// running over Kafka inside your own service, as Kafka Streams runs inside a
// Java one (docs/design.md "Architecture").
//
// Open connects to the cluster, creates the topics it needs and loads the
// ruleset; Run runs the tasks until its context ends. While it runs, Decide
// decides one event at once, Entity reads what Vigil holds about a key,
// Publish, Validate and Backtest manage the ruleset. `vigil serve` and its
// REST API (package api, which speaks this package's methods through its own
// Backend interface) are built on it.
//
// Requests return the errors of package service (ErrNotFound, ErrSaturated,
// ...), which this package re-exports; match them with errors.Is.
package vigil

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"

	"github.com/vigil-cep/vigil/examples"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/service"
)

// Config configures an embedded Vigil: how to reach Kafka, the group, the
// topics, checkpoints and limits. Zero values take the defaults of
// kafka.DefaultConfig.
type Config = kafka.Config

// The views and errors of requests (package service).
type (
	Decision       = service.Decision
	DecisionQuery  = service.DecisionQuery
	Entity         = service.Entity
	EntityQuery    = service.EntityQuery
	Version        = service.Version
	Change         = service.Change
	BacktestReport = service.BacktestReport
)

// The errors of requests (package service).
var (
	ErrNotFound        = service.ErrNotFound
	ErrVersionConflict = service.ErrVersionConflict
	ErrIDConflict      = service.ErrIDConflict
	ErrSaturated       = service.ErrSaturated
	ErrNotOwner        = service.ErrNotOwner
	ErrBadEvent        = service.ErrBadEvent
	ErrUnavailable     = service.ErrUnavailable
)

// Service is Vigil running over Kafka. Its methods are safe for concurrent
// use.
type Service struct {
	k       *kafka.Service
	cfg     Config
	current atomic.Pointer[currentVersion] // Ruleset's
	recent  recentReader                   // RecentDecisions'
}

// Open connects to the brokers of cfg.Kafka, creates missing topics and
// loads the ruleset: the latest version on the rules topic or, when that
// topic is empty, ruleset (YAML or JSON; nil: the example ruleset), which
// becomes version 1. It runs nothing yet: call Run.
func Open(ctx context.Context, cfg Config, ruleset []byte) (*Service, error) {
	seed, explicit := ruleset, ruleset != nil
	if !explicit {
		seed = examples.Fraud
	}
	k, err := kafka.New(ctx, cfg, seed, explicit)
	if err != nil {
		return nil, err
	}
	return &Service{k: k, cfg: cfg}, nil
}

// Run joins the consumer group and runs the tasks of the partitions it is
// given until ctx ends; then it drains them, takes their final checkpoints
// and closes the service's clients. It returns the first fatal error.
func (s *Service) Run(ctx context.Context) error {
	defer s.recent.close()
	return s.k.Run(ctx)
}

// Close releases a service that was opened and never run.
func (s *Service) Close() {
	s.recent.close()
	s.k.Close()
}

// Ready says whether the service has joined its group and can decide; the
// error says why not.
func (s *Service) Ready(context.Context) error { return s.k.Ready() }

// Decide evaluates one event of a stream with decisions at once, against its
// key's state, records the event on its input topic and the decision on the
// decisions topic, and returns the decision once the broker has both
// (docs/design.md "Decision API"). A known id returns the stored decision
// with replay true; the same id with another body is ErrIDConflict.
func (s *Service) Decide(ctx context.Context, stream string, event []byte) (d *Decision, replay bool, err error) {
	return s.k.Decide(ctx, stream, event)
}

// Decision returns the decision of a transaction id held by one of this
// instance's tasks, or ErrNotFound.
func (s *Service) Decision(ctx context.Context, id string) (*Decision, error) {
	return s.k.Decision(ctx, id)
}

// Entity returns what the task owning key holds about it.
func (s *Service) Entity(ctx context.Context, key string, q EntityQuery) (*Entity, error) {
	return s.k.Entity(ctx, key, q)
}

// Backtest runs candidate (a ruleset document) next to the running version
// over events (NDJSON in the replay format) or, when events is nil, over
// what the input topics retain, each on a copy of the state, and reports
// what would change, with up to samples changed decisions.
func (s *Service) Backtest(ctx context.Context, candidate, events []byte, samples int) (*BacktestReport, error) {
	return s.k.Backtest(ctx, candidate, events, 0, samples)
}

// Validate loads a ruleset document as Publish would, without publishing
// it: a rules.ErrorList names every mistake with its position.
func (s *Service) Validate(doc []byte) error {
	_, err := rules.Load(doc)
	return err
}

// Ruleset versions.

func version(v *kafka.RulesetVersion) *Version {
	return &Version{Number: v.Number, Digest: v.Digest, Document: []byte(v.Document), Time: v.Time,
		Change: Change{Author: v.Author, Comment: v.Comment}}
}

// Ruleset returns the running version of the ruleset document, or
// ErrNotFound before the first one. The Version is shared by the callers
// until the next version: read it, do not change it.
func (s *Service) Ruleset(context.Context) (*Version, error) {
	v := s.k.Current()
	if v == nil {
		return nil, ErrNotFound
	}
	// Every decision request asks (the API's deciding streams): the
	// document is copied once per version, not once per request.
	if c := s.current.Load(); c != nil && c.of == v {
		return c.v, nil
	}
	c := &currentVersion{of: v, v: version(v)}
	s.current.Store(c)
	return c.v, nil
}

// currentVersion is the converted running version, and what it was
// converted from.
type currentVersion struct {
	of *kafka.RulesetVersion
	v  *Version
}

// Versions returns every published version, oldest first.
func (s *Service) Versions(context.Context) ([]*Version, error) {
	vs := s.k.Versions()
	out := make([]*Version, len(vs))
	for i, v := range vs {
		out[i] = version(v)
	}
	return out, nil
}

// Version returns version n, or ErrNotFound.
func (s *Service) Version(_ context.Context, n int64) (*Version, error) {
	vs := s.k.Versions()
	if n < 1 || n > int64(len(vs)) {
		return nil, ErrNotFound
	}
	return version(vs[n-1]), nil
}

// Publish validates doc and publishes it as the version after expect: every
// instance of the group switches to it between two events. It returns
// ErrVersionConflict when the current version is not expect, a
// rules.ErrorList when doc does not load, and a *service.TooLargeError when
// the rules topic cannot store it.
func (s *Service) Publish(ctx context.Context, doc []byte, expect int64, c Change) (*Version, error) {
	v, err := s.k.Publish(ctx, doc, expect, c.Author, c.Comment)
	if tl := (*kafka.RulesetTooLargeError)(nil); errors.As(err, &tl) {
		return nil, &service.TooLargeError{Limit: tl.Limit, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return version(v), nil
}

// decisionsTopic is the topic RecentDecisions reads.
func (s *Service) decisionsTopic() string {
	return cmp.Or(s.cfg.Topics.Decisions, kafka.DefaultTopics.Decisions)
}
