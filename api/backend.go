package api

import (
	"context"
	"encoding/json"

	"github.com/vigil-cep/vigil/service"
)

// Backend is what the HTTP API serves: the running service (vigil.Service,
// which satisfies it without either package importing the other) in
// production. Its types and errors are package service's. It deals in whole ruleset documents; the per-item
// resources (/v1/rules/{id}, /v1/windows/{id}, ...) are edits of the current
// document that the API turns into new versions.
type Backend interface {
	// Ruleset returns the current version of the ruleset document.
	Ruleset(ctx context.Context) (*service.Version, error)
	// Versions returns every version, oldest first.
	Versions(ctx context.Context) ([]*service.Version, error)
	// Version returns version n, or service.ErrNotFound.
	Version(ctx context.Context, n int64) (*service.Version, error)
	// Publish validates doc (YAML or JSON) and publishes it as the version
	// after expect; every instance switches to it without a restart. It
	// returns service.ErrVersionConflict when the current version is not expect (a
	// concurrent change), a rules.ErrorList when doc does not load, or a
	// *service.TooLargeError when it cannot be stored.
	Publish(ctx context.Context, doc []byte, expect int64, change service.Change) (*service.Version, error)

	// Decide evaluates one event of a decide: true stream at once against
	// its key's current state, records the event on its input topic and the
	// decision on the decisions topic, and returns the decision once both
	// are acknowledged. A known id returns the stored decision with replay
	// true; the same id with another body is service.ErrIDConflict. service.ErrSaturated
	// when the owning task cannot take it now; service.ErrNotOwner when another
	// instance owns the key's partition.
	Decide(ctx context.Context, stream string, body []byte) (d *service.Decision, replay bool, err error)
	// Decision returns a decision by id, or service.ErrNotFound.
	Decision(ctx context.Context, id string) (*service.Decision, error)
	// RecentDecisions returns the newest decision records that q selects,
	// newest first, and how many records it looked through; service.ErrUnavailable
	// when the backend cannot list decisions.
	RecentDecisions(ctx context.Context, q service.DecisionQuery) (recs []json.RawMessage, scanned int, err error)
	// Entity returns what the service holds about a key.
	Entity(ctx context.Context, key string, q service.EntityQuery) (*service.Entity, error)
	// Backtest runs a candidate ruleset next to the current one over events
	// (NDJSON in the replay format, or the retained input topics when
	// events is nil) on a copy, and reports what would change.
	Backtest(ctx context.Context, candidate []byte, events []byte, limit int) (*service.BacktestReport, error)
	// Ready reports whether the service runs tasks and can decide.
	Ready(ctx context.Context) error
}

// orEmpty returns m, or an empty map for nil: JSON {} rather than null.
func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}
