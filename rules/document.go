package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Document is a ruleset as written: the YAML or JSON object of docs/design.md
// "Ruleset document", decoded but not yet compiled. It remembers where each
// item sits in the source so that compile errors carry positions. The REST API (later) reads and writes
// the same item types.
type Document struct {
	Streams     map[string]*StreamSpec     `yaml:"streams" json:"streams,omitempty"`
	Windows     map[string]*WindowSpec     `yaml:"windows" json:"windows,omitempty"`
	Rules       map[string]*RuleSpec       `yaml:"rules" json:"rules,omitempty"`
	Patterns    map[string]*PatternSpec    `yaml:"patterns" json:"patterns,omitempty"`
	Joins       map[string]*JoinSpec       `yaml:"joins" json:"joins,omitempty"`
	Enrichments map[string]*EnrichmentSpec `yaml:"enrichments" json:"enrichments,omitempty"`
	Limits      *LimitsSpec                `yaml:"limits" json:"limits,omitempty"`

	pos   map[string]Pos // dotted path -> position of its value
	lines []string       // source lines, for snippets
}

// StreamSpec declares an input stream: where it comes from and how to read an
// event's key, time and id.
type StreamSpec struct {
	Topic         string            `yaml:"topic" json:"topic,omitempty"`
	Key           Expr              `yaml:"key" json:"key"`
	Time          Expr              `yaml:"time" json:"time,omitempty"`
	ID            Expr              `yaml:"id" json:"id,omitempty"`
	Decide        Decide            `yaml:"decide" json:"decide,omitempty"`
	Watermark     WatermarkSpec     `yaml:"watermark" json:"watermark"`
	Retention     *Duration         `yaml:"retention" json:"retention,omitempty"`
	MaxHistory    int               `yaml:"max_history" json:"max_history,omitempty"`
	MaxFutureSkew *Duration         `yaml:"max_future_skew" json:"max_future_skew,omitempty"`
	Fields        map[string]string `yaml:"fields" json:"fields,omitempty"`
	MaxFieldBytes int               `yaml:"max_field_bytes" json:"max_field_bytes,omitempty"`
}

// LimitsSpec sets the ruleset's bounds on what its expressions may cost.
type LimitsSpec struct {
	// Cost is the worst-case cost one evaluation of one expression may have,
	// in units of about 10 ns (cost.go): DefaultCostBudget when unset, at
	// most MaxCostBudget.
	Cost int `yaml:"cost" json:"cost,omitempty"`
}

// WatermarkSpec is a stream's watermark strategy.
type WatermarkSpec struct {
	MaxOutOfOrder Duration  `yaml:"max_out_of_order" json:"max_out_of_order"`
	IdleAfter     *Duration `yaml:"idle_after" json:"idle_after,omitempty"`
}

// WindowSpec declares a keyed event-time window with its aggregates. Exactly
// one of Tumbling, Sliding and Session is set.
type WindowSpec struct {
	Stream          string          `yaml:"stream" json:"stream"`
	Tumbling        *Duration       `yaml:"tumbling" json:"tumbling,omitempty"`
	Sliding         *SlidingSpec    `yaml:"sliding" json:"sliding,omitempty"`
	Session         *SessionSpec    `yaml:"session" json:"session,omitempty"`
	Offset          Duration        `yaml:"offset" json:"offset"`
	AllowedLateness Duration        `yaml:"allowed_lateness" json:"allowed_lateness"`
	Where           Expr            `yaml:"where" json:"where,omitempty"`
	Aggregate       map[string]Expr `yaml:"aggregate" json:"aggregate"`
}

// SlidingSpec is a sliding window's size and slide.
type SlidingSpec struct {
	Size  Duration `yaml:"size" json:"size"`
	Slide Duration `yaml:"slide" json:"slide"`
}

// SessionSpec is a session window's inactivity gap.
type SessionSpec struct {
	Gap Duration `yaml:"gap" json:"gap"`
}

// RuleSpec declares a decision rule over a deciding stream.
type RuleSpec struct {
	Stream      string  `yaml:"stream" json:"stream"`
	Action      string  `yaml:"action" json:"action"`
	Score       float64 `yaml:"score" json:"score"`
	Mode        string  `yaml:"mode" json:"mode,omitempty"`
	When        Expr    `yaml:"when" json:"when"`
	Reason      Expr    `yaml:"reason" json:"reason,omitempty"`
	Description string  `yaml:"description" json:"description,omitempty"`
}

// PatternSpec declares a sequence pattern over one stream (docs/design.md
// "Patterns"), matched per key by an NFA with FlinkCEP's semantics.
type PatternSpec struct {
	Stream      string     `yaml:"stream" json:"stream"`
	Steps       []StepSpec `yaml:"steps" json:"steps"`
	Within      Duration   `yaml:"within" json:"within,omitempty"`
	AfterMatch  SkipSpec   `yaml:"after_match" json:"after_match,omitempty"`
	Ordering    string     `yaml:"ordering" json:"ordering,omitempty"`
	Timeouts    bool       `yaml:"timeouts" json:"timeouts,omitempty"`
	MaxPartials int        `yaml:"max_partials" json:"max_partials,omitempty"`
}

// StepSpec is one step of a pattern.
type StepSpec struct {
	Name              string    `yaml:"name" json:"name"`
	Where             Expr      `yaml:"where" json:"where,omitempty"`
	Times             TimesSpec `yaml:"times" json:"times,omitempty"`
	OneOrMore         bool      `yaml:"one_or_more" json:"one_or_more,omitempty"`
	TimesOrMore       int       `yaml:"times_or_more" json:"times_or_more,omitempty"`
	Optional          bool      `yaml:"optional" json:"optional,omitempty"`
	Greedy            bool      `yaml:"greedy" json:"greedy,omitempty"`
	Until             Expr      `yaml:"until" json:"until,omitempty"`
	Consecutive       bool      `yaml:"consecutive" json:"consecutive,omitempty"`
	AllowCombinations bool      `yaml:"allow_combinations" json:"allow_combinations,omitempty"`
	Contiguity        string    `yaml:"contiguity" json:"contiguity,omitempty"`
	Not               string    `yaml:"not" json:"not,omitempty"`
}

// TimesSpec is a step's times: n, or [n, m]. The zero value means not set.
type TimesSpec struct{ Min, Max int }

func (t *TimesSpec) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
		v, err := strconv.Atoi(n.Value)
		if err != nil || v < 1 {
			d.fail(n, path, fmt.Errorf("times must be a positive integer or [min, max], not %s", n.Value))
			return
		}
		t.Min, t.Max = v, v
	case n.Kind == yaml.SequenceNode && len(n.Content) == 2:
		lo, err1 := strconv.Atoi(n.Content[0].Value)
		hi, err2 := strconv.Atoi(n.Content[1].Value)
		if err1 != nil || err2 != nil || lo < 0 || hi < 1 || lo > hi {
			d.fail(n, path, errors.New("times [min, max] needs integers with 0 <= min <= max and max >= 1"))
			return
		}
		t.Min, t.Max = lo, hi
	default:
		d.fail(n, path, errors.New("times must be a positive integer or [min, max]"))
	}
}

// SkipSpec is a pattern's after-match skip strategy: no_skip, skip_to_next,
// skip_past_last_event, {skip_to_first: step} or {skip_to_last: step}.
type SkipSpec struct {
	Kind string // "" means no_skip
	Step string
}

func (s *SkipSpec) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode:
		switch n.Value {
		case "no_skip", "skip_to_next", "skip_past_last_event":
			s.Kind = n.Value
		default:
			d.fail(n, path, fmt.Errorf("after_match must be no_skip, skip_to_next, skip_past_last_event, {skip_to_first: step} or {skip_to_last: step}, not %q", n.Value))
		}
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && (n.Content[0].Value == "skip_to_first" || n.Content[0].Value == "skip_to_last"):
		s.Kind, s.Step = n.Content[0].Value, n.Content[1].Value
	default:
		d.fail(n, path, errors.New("after_match must be no_skip, skip_to_next, skip_past_last_event, {skip_to_first: step} or {skip_to_last: step}"))
	}
}

// Expr is the source text of an expr-lang expression.
type Expr string

// Duration is a document duration in milliseconds, written as a Go duration
// string ("5m", "250ms").
type Duration int64

// String formats d as a Go duration string.
func (d Duration) String() string { return time.Duration(d * Duration(time.Millisecond)).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// parseDuration reads a document duration. Vigil's clock ticks in milliseconds,
// so finer durations are refused rather than silently truncated.
func parseDuration(s string) (Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want a Go duration such as \"5m\" or \"250ms\")", s)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("duration %q is not a whole number of milliseconds", s)
	}
	return Duration(d / time.Millisecond), nil
}

// Decide is when a stream's events are decided: never (""), on arrival, or
// once the watermark passes them. `decide: true` means arrival.
type Decide string

// Decide modes.
const (
	DecideNever     Decide = ""
	DecideArrival   Decide = "arrival"
	DecideWatermark Decide = "watermark"
)

func parseDecide(s string) (Decide, error) {
	switch strings.ToLower(s) {
	case "true", "arrival":
		return DecideArrival, nil
	case "false", "":
		return DecideNever, nil
	case "watermark":
		return DecideWatermark, nil
	}
	return "", fmt.Errorf("decide must be true, false, arrival or watermark, not %s", strconv.Quote(s))
}
