// Package service is what Vigil's core and its drivers share about requests
// (docs/design.md "Decision API"): the errors a decision, a decision lookup
// or an entity read can end in, and the entity view. The engine and the
// Kafka runtime return these; the HTTP API (api) and an embedding program
// (the root package vigil) read them. It imports nothing of the engine or
// Kafka, so that the API depends on this vocabulary, not on the runtime.
package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-cep/vigil/stream"
)

// The errors of requests. Each is matched with errors.Is; the HTTP API maps
// each to one status (docs/design.md "Decision API").
var (
	ErrNotFound        = errors.New("not found")
	ErrVersionConflict = errors.New("the ruleset changed meanwhile")
	ErrIDConflict      = errors.New("the id was decided with another body")
	ErrSaturated       = errors.New("saturated: retry later")
	ErrNotOwner        = errors.New("another instance owns this key")
	ErrBadEvent        = errors.New("the event cannot be decided") // unreadable, or no key, time or id
	ErrUnavailable     = errors.New("unavailable")                 // the backend cannot serve this now

	// ErrNotDecided is a stream whose events are not decided: a bad event
	// for the decision API.
	ErrNotDecided = fmt.Errorf("%w: not a stream with decisions", ErrBadEvent)
	// ErrPending is an id whose decision waits for the watermark
	// (decide: watermark): the client retries later, as when saturated.
	ErrPending = fmt.Errorf("%w: the decision waits for the watermark", ErrSaturated)
)

// NotOwnerError is ErrNotOwner naming the owner: Owner is the API address of
// the instance that owns the key's partition, "" when none does now (the
// group is rebalancing) or it advertises none (docs/design.md "Request
// routing").
type NotOwnerError struct {
	Partition int32
	Owner     string
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("no instance owns partition %d now (the group is rebalancing)", e.Partition)
	}
	return fmt.Sprintf("partition %d is owned by the instance at %s", e.Partition, e.Owner)
}

// Is makes errors.Is(err, ErrNotOwner) hold.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

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

// Selects reports whether a decision record is one q selects.
func (q DecisionQuery) Selects(rec []byte) bool {
	if q.Action == "" && q.Rule == "" {
		return true
	}
	var d struct {
		Action string `json:"action"`
		Rules  []struct {
			Rule string `json:"rule"`
		} `json:"rules"`
		Shadow []struct {
			Rule string `json:"rule"`
		} `json:"shadow"`
	}
	if json.Unmarshal(rec, &d) != nil || q.Action != "" && d.Action != q.Action {
		return false
	}
	if q.Rule == "" {
		return true
	}
	for _, hits := range [][]struct {
		Rule string `json:"rule"`
	}{d.Rules, d.Shadow} {
		for _, hit := range hits {
			if hit.Rule == q.Rule {
				return true
			}
		}
	}
	return false
}

// EntityQuery bounds an entity view.
type EntityQuery struct {
	Limit     int    // history events per stream, newest first (default 50)
	Before    int64  // only events strictly before this event time; 0: newest
	Stream    string // only this stream's history; "": every stream
	Decisions int    // recent decisions (default 10)
}

// Entity is what the task owning a key holds about it, and how fresh that
// is: the engine fills the state, the runtime where it runs.
type Entity struct {
	Key       string                       `json:"key"`
	History   map[string][]json.RawMessage `json:"history"`         // stream -> {"time": t, "event": {...}}, newest first
	Windows   []json.RawMessage            `json:"windows"`         // open windows with their current values
	Partials  map[string]int               `json:"partial_matches"` // pattern -> open partial matches
	Decisions []json.RawMessage            `json:"recent_decisions"`
	Watermark int64                        `json:"watermark"` // the owning task's; NoWatermark: none yet
	LagMillis int64                        `json:"lag_ms"`    // processing time minus watermark
	Task      int32                        `json:"task"`
	Instance  string                       `json:"instance"` // the owning instance's API address (docs/design.md "Request routing")
}

// NoWatermark is Entity.Watermark while the owning task has none (no input
// has delivered an event yet). JSON shows it, and the lag that cannot be
// measured against it, as null.
const NoWatermark = stream.MinTime

// MarshalJSON writes e with "watermark" and "lag_ms" null when e has no
// watermark, instead of -9223372036854775808 and a meaningless lag, and nil
// maps and slices as {} and []: the OpenAPI document promises objects and
// arrays, never null. It lists Entity's fields again (TestEntityJSONFields
// holds the two lists together).
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
	}{Key: e.Key, History: orEmpty(e.History), Windows: e.Windows, Partials: orEmpty(e.Partials), Decisions: e.Decisions,
		Task: e.Task, Instance: e.Instance}
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
	enc.SetEscapeHTML(false) // events keep their '<' and '&', as the API writes them
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// orEmpty returns m, or an empty map for nil: JSON {} rather than null.
func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}
