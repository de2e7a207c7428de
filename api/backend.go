package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/vigil-cep/vigil/stream"
)

// Backend is what the HTTP API serves: the running service (kafka.Service)
// in production. It deals in whole ruleset documents; the per-item
// resources (/v1/rules/{id}, /v1/windows/{id}, ...) are edits of the current
// document that the API turns into new versions.
type Backend interface {
	// Ruleset returns the current version of the ruleset document.
	Ruleset(ctx context.Context) (*Version, error)
	// Versions returns every version, oldest first.
	Versions(ctx context.Context) ([]*Version, error)
	// Version returns version n, or ErrNotFound.
	Version(ctx context.Context, n int64) (*Version, error)
	// Publish validates doc (YAML or JSON) and publishes it as the version
	// after expect; every instance switches to it without a restart. It
	// returns ErrVersionConflict when the current version is not expect (a
	// concurrent change), a rules.ErrorList when doc does not load, or a
	// *TooLargeError when it cannot be stored.
	Publish(ctx context.Context, doc []byte, expect int64, change Change) (*Version, error)

	// Decide evaluates one event of a decide: true stream at once against
	// its key's current state, records the event on its input topic and the
	// decision on the decisions topic, and returns the decision once both
	// are acknowledged. A known id returns the stored decision with replay
	// true; the same id with another body is ErrIDConflict. ErrSaturated
	// when the owning task cannot take it now; ErrNotOwner when another
	// instance owns the key's partition.
	Decide(ctx context.Context, stream string, body []byte) (d *Decision, replay bool, err error)
	// Decision returns a decision by id, or ErrNotFound.
	Decision(ctx context.Context, id string) (*Decision, error)
	// RecentDecisions returns the newest decision records that q selects,
	// newest first, and how many records it looked through; ErrUnavailable
	// when the backend cannot list decisions.
	RecentDecisions(ctx context.Context, q DecisionQuery) (recs []json.RawMessage, scanned int, err error)
	// Entity returns what the service holds about a key.
	Entity(ctx context.Context, key string, q EntityQuery) (*Entity, error)
	// Backtest runs a candidate ruleset next to the current one over events
	// (NDJSON in the replay format, or the retained input topics when
	// events is nil) on a copy, and reports what would change.
	Backtest(ctx context.Context, candidate []byte, events []byte, limit int) (*BacktestReport, error)
	// Ready reports whether the service runs tasks and can decide.
	Ready(ctx context.Context) error
}

// Errors a Backend returns; the API maps them to HTTP statuses.
var (
	ErrNotFound        = errors.New("not found")
	ErrVersionConflict = errors.New("version conflict")
	ErrIDConflict      = errors.New("id already decided with another body")
	ErrSaturated       = errors.New("saturated")
	ErrNotOwner        = errors.New("another instance owns this key")
	ErrBadEvent        = errors.New("the event cannot be decided") // no key, time or id; not a deciding stream
	ErrUnavailable     = errors.New("unavailable")                 // the backend cannot serve this now (503)
)

// TooLargeError is what Publish returns when a document cannot be stored:
// its record exceeds the store's limit (the rules topic's max.message.bytes).
// The API answers 413 naming the limit.
type TooLargeError struct {
	Limit int64 // bytes; 0 when the store could not say
	Err   error // the store's explanation, shown to the client
}

func (e *TooLargeError) Error() string { return e.Err.Error() }
func (e *TooLargeError) Unwrap() error { return e.Err }

// Change says who made a ruleset change and why (the audit log).
type Change struct {
	Author  string `json:"author"`
	Comment string `json:"comment,omitempty"`
}

// Version is one published version of the ruleset document.
type Version struct {
	Number   int64     `json:"version"`
	Digest   string    `json:"digest"` // content hash of the document (rules.Ruleset.Version)
	Document []byte    `json:"-"`      // the document as published (YAML or JSON)
	Time     time.Time `json:"time"`
	Change
}

// Decision is a decision record (docs/design.md "Decision records"), as emitted, plus what the
// matched rules read (explainability).
type Decision struct {
	Record   json.RawMessage           `json:"decision"`
	Features map[string]map[string]any `json:"features,omitempty"` // rule -> feature -> value
}

// DecisionQuery selects recent decisions (GET /v1/decisions).
type DecisionQuery struct {
	Limit  int    // at most this many, newest first
	Action string // only decisions with this action; "" = any
	Rule   string // only decisions this rule matched, active or shadow; "" = any
}

// EntityQuery bounds an entity view.
type EntityQuery struct {
	Limit  int    // history events per stream (newest first)
	Before int64  // page: events strictly before this event time; 0 = newest
	Stream string // only this stream's history, "" = all
}

// Entity is what the service holds about one key.
type Entity struct {
	Key       string                       `json:"key"`
	History   map[string][]json.RawMessage `json:"history"`         // stream -> events, newest first
	Windows   []json.RawMessage            `json:"windows"`         // open windows with current values
	Partials  map[string]int               `json:"partial_matches"` // pattern -> open partial matches
	Decisions []json.RawMessage            `json:"recent_decisions"`
	Watermark int64                        `json:"watermark"` // the owning task's; NoWatermark: none yet
	LagMillis int64                        `json:"lag_ms"`    // processing time minus watermark
	Task      int32                        `json:"task"`
	Instance  string                       `json:"instance"` // the owning instance's API address (docs/design.md "Request routing")
}

// NoWatermark is Entity.Watermark while the owning task has none (no input
// has delivered an event yet): stream.MinTime. JSON shows it, and the lag
// that cannot be measured against it, as null.
const NoWatermark = stream.MinTime

// MarshalJSON writes e with "watermark" and "lag_ms" null when e has no
// watermark, instead of -9223372036854775808 and a meaningless lag, and
// nil maps and slices as {} and []. It lists Entity's fields again
// (TestEntityJSONFields holds the two lists together).
func (e Entity) MarshalJSON() ([]byte, error) {
	out := struct { // Entity's fields in its order, the two nullable
		Key       string                       `json:"key"`
		History   map[string][]json.RawMessage `json:"history"`
		Windows   []json.RawMessage            `json:"windows"`
		Partials  map[string]int               `json:"partial_matches"`
		Decisions []json.RawMessage            `json:"recent_decisions"`
		Watermark *int64                       `json:"watermark"`
		LagMillis *int64                       `json:"lag_ms"`
		Task      int32                        `json:"task"`
		Instance  string                       `json:"instance"`
	}{Key: e.Key, History: orEmpty(e.History), Windows: e.Windows, Partials: orEmpty(e.Partials), Decisions: e.Decisions, Task: e.Task,
		Instance: e.Instance}
	// The OpenAPI document promises objects and arrays, never null: a
	// Backend that leaves them nil still answers {} and [].
	if out.Windows == nil {
		out.Windows = []json.RawMessage{}
	}
	if out.Decisions == nil {
		out.Decisions = []json.RawMessage{}
	}
	if e.Watermark != NoWatermark {
		out.Watermark, out.LagMillis = &e.Watermark, &e.LagMillis
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as writeJSON: events keep their '<' and '&'
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// BacktestReport is what a candidate ruleset would have decided.
type BacktestReport struct {
	Events          int64             `json:"events"`
	Decisions       int64             `json:"decisions"`
	Hits            map[string]int64  `json:"hits"`              // rule -> matched decisions (candidate)
	NewHits         map[string]int64  `json:"new_hits"`          // rule -> of those, not matched under the current ruleset
	Changed         int64             `json:"changed"`           // decisions whose action differs from the current ruleset's
	ChangedByAction map[string]int64  `json:"changed_by_action"` // "allow->block" -> count
	Samples         []json.RawMessage `json:"samples"`           // candidate decisions that changed, up to the limit
	// Before holds, by id, the current ruleset's decision of each sample
	// when the request asked for it ("before": true); the Handler fills it
	// in (backtestBefore), a Backend leaves it nil.
	Before map[string]json.RawMessage `json:"before,omitempty"`
}

// orEmpty returns m, or an empty map for nil: JSON {} rather than null.
func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}
