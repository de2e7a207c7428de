package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/vigil-cep/vigil/stream"
	"github.com/vigil-cep/vigil/window"
)

// Defaults for stream fields a document leaves out.
const (
	DefaultIdleAfter     = Duration(60_000)    // 1m
	DefaultMaxFutureSkew = Duration(3_600_000) // 1h
	DefaultMaxHistory    = 10_000
	// MinIDRetention is the shortest time ids are remembered for idempotency,
	// even on a stream whose history nobody reads.
	MinIDRetention int64 = 3_600_000
)

// Ruleset is a compiled, validated ruleset: immutable and safe to share between
// tasks. Each task binds its own Evaluator to it.
type Ruleset struct {
	Doc         *Document
	Version     string // content hash of the source document
	Streams     []*Stream
	Windows     []*Window
	Rules       []*Rule
	Patterns    []*Pattern
	Joins       []*Join
	Enrichments []*Enrichment
	// Warnings are what a loaded ruleset may get wrong at run time without
	// being invalid (vigil validate prints them).
	Warnings ErrorList

	streamIndex  map[string]int
	derivedOrder []string // pattern names, in the order of their derived streams
	joinOrder    []string // join names, likewise
	noFeatures   bool
	maxRecord    float64 // the record limit the cost bound assumes (cost.go)
	noOptimize   bool    // compile without expr's optimizer (FuzzCostBound)
}

// Stream is a compiled stream declaration.
type Stream struct {
	Name, Topic string
	Index       int
	Decide      Decide
	Watermark   stream.WatermarkConfig
	// Retention is how long (event time) the key's events are kept for
	// history(); zero when no rule reads the stream.
	Retention int64
	// IDRetention is how long ids are remembered for idempotency.
	IDRetention int64
	MaxHistory  int
	// HistoryFields are the only fields of its events that rules read through
	// history(); the task keeps just those. Nil keeps every field (some rule
	// reads the events whole).
	HistoryFields []string
	// DecodeFields are the only top-level fields of its events that anything
	// reads, when that is known: the decoder skips the others rather than
	// box and store them. Nil decodes every field: the events leave the
	// task whole (patterns, joins), wait (decide: watermark), are enriched,
	// are kept whole in history, or an expression names $env.
	DecodeFields  []string
	MaxFutureSkew int64 // zero: no check
	// MaxFieldBytes bounds each field an expression reads (a string's bytes,
	// or a list's or object's JSON text): the cost bound assumes it, and a
	// longer field sends its event to the DLQ.
	MaxFieldBytes int
	// BoundedFields are the top-level fields expressions name (a superset:
	// function and variable names too): the decoder holds them to
	// MaxFieldBytes. Set for input streams.
	BoundedFields []string
	HasID         bool
	Windows       []int // indices of the windows over this stream
	Rules         []int // indices of the active and shadow rules over this stream
	Patterns      []int // indices of the patterns over this stream
	// Pattern is the index of the pattern whose matches form this stream, or
	// -1; Join likewise for a join's pairs. Both -1: an input stream.
	Pattern int
	Join    int
	Joins   []JoinSide // the joins this stream feeds
	// Enrichments are the lookups merged into this stream's events, in order.
	Enrichments []int

	key, time, id exprSource
	fields        map[string]any // expr environment when the stream declares fields
	predicates    []*exprSource  // element predicates of history features (features.go)
	predIndex     map[string]int
	// inlineField is the field of the stream's first distinct-count feature:
	// Mark keeps its value inline (Mark.Inline).
	inlineField string
}

// InlineField is the field whose string value Mark keeps inline
// (Mark.Inline), or "" when no distinct count reads one.
func (st *Stream) InlineField() string { return st.inlineField }

// Predicates returns how many element predicates the stream's events are
// marked with on arrival (Evaluator.Mark).
func (st *Stream) Predicates() int { return len(st.predicates) }

// Input reports whether the stream is read from its topic, rather than
// derived from a pattern's matches or a join's pairs.
func (st *Stream) Input() bool { return st.Pattern < 0 && st.Join < 0 }

// Window is a compiled window declaration.
type Window struct {
	Name   string
	Stream int
	Spec   window.Spec
	Aggs   []window.Aggregate
	where  *exprSource
	args   []*exprSource // per aggregate; nil for count()
}

// Action is what a decision asks the caller to do; higher is more severe.
type Action uint8

// Actions, least severe first.
const (
	Allow Action = iota
	Review
	Block
)

func (a Action) String() string { return [...]string{"allow", "review", "block"}[a] }

// Mode is a rule's lifecycle state.
type Mode uint8

// Modes. Only active rules change decisions; shadow rules are evaluated and
// reported apart; draft and disabled rules are not evaluated.
const (
	Active Mode = iota
	Shadow
	Disabled
	Draft
)

func (m Mode) String() string { return [...]string{"active", "shadow", "disabled", "draft"}[m] }

// Rule is a compiled rule.
type Rule struct {
	Name   string
	Stream int
	Action Action
	Score  float64
	Mode   Mode
	when   exprSource
	reason *exprSource
	// features are the sub-expressions of when that Explain evaluates.
	features []*exprSource
}

// LoadOption configures Load and Compile.
type LoadOption interface{ apply(*compiler) }

type loadOptionFunc func(*compiler)

func (f loadOptionFunc) apply(c *compiler) { f(c) }

// Features turns the history-feature rewrite (features.go) on or off. It is
// on by default; off, every history() predicate runs in expr's VM at every
// decision. Both give the same decisions (a differential test holds them to
// it); the switch exists for that test and for measuring the rewrite.
func Features(on bool) LoadOption {
	return loadOptionFunc(func(c *compiler) { c.rs.noFeatures = !on })
}

// Load parses and compiles a ruleset document (YAML or JSON). Every mistake
// comes back at once as an ErrorList.
func Load(src []byte, opts ...LoadOption) (*Ruleset, error) {
	doc, err := Parse(src)
	if err != nil {
		return nil, err
	}
	rs, err := Compile(doc, opts...)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(src)
	rs.Version = hex.EncodeToString(sum[:6])
	return rs, nil
}

// Compile validates doc and compiles every expression in it.
func Compile(doc *Document, opts ...LoadOption) (*Ruleset, error) {
	c := &compiler{rs: &Ruleset{Doc: doc, streamIndex: map[string]int{}, maxRecord: DefaultMaxRecordBytes}, doc: doc, registering: true}
	for _, o := range opts {
		o.apply(c)
	}
	var errs ErrorList
	fail := func(path string, err error) {
		var ce *CompileError
		if errors.As(err, &ce) {
			errs = append(errs, ce)
			return
		}
		pos := doc.at(path)
		e := &CompileError{Path: path, Line: pos.Line, Column: pos.Column, Err: err}
		errs = append(errs, e)
	}
	if len(doc.Streams) == 0 {
		fail("streams", errors.New("a ruleset needs at least one stream"))
	}
	c.checkLimits(fail)
	c.compileStreams(fail)
	c.addDerivedStreams(fail)
	c.addJoinStreams(fail)
	c.compileWindows(fail)
	c.compilePatterns(fail)
	c.compileJoins(fail)
	c.checkCycles(fail)
	c.compileEnrichments(fail)
	c.compileRules(fail)
	c.deriveRetention(fail)
	for _, st := range c.rs.Streams {
		for _, p := range st.predicates {
			if _, _, err := c.compile(p, &Context{}); err != nil {
				fail(p.path, fmt.Errorf("internal error: history predicate %q: %w", p.src, err))
			}
		}
	}
	c.registering = false
	if len(errs) > 0 {
		return nil, doc.withSnippets(errs).sorted()
	}
	c.deriveDecodeFields() // parses the expressions again: only once they passed the checks
	c.warnUndeclared()
	return c.rs, nil
}

func sortedNames[T any](m map[string]T) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// fieldTypes maps the declared field types to example values for expr's checker.
var fieldTypes = map[string]any{
	"string": "", "number": 0.0, "bool": false, "list": []any{}, "map": map[string]any{}, "any": nil,
}

func (c *compiler) compileStreams(fail func(string, error)) {
	rs, doc := c.rs, c.doc
	for i, name := range sortedNames(doc.Streams) {
		rs.streamIndex[name] = i
	}
	for i, name := range sortedNames(doc.Streams) {
		spec, path := doc.Streams[name], "streams."+name
		if spec == nil {
			spec = &StreamSpec{}
		}
		st := &Stream{Name: name, Topic: cmpOr(spec.Topic, name), Index: i, Decide: spec.Decide,
			MaxHistory: spec.MaxHistory, MaxFieldBytes: spec.MaxFieldBytes, Pattern: noPattern, Join: noJoin}
		rs.Streams = append(rs.Streams, st)
		if spec.Fields != nil {
			st.fields = make(map[string]any, len(spec.Fields))
			for _, f := range sortedNames(spec.Fields) {
				v, ok := fieldTypes[spec.Fields[f]]
				if !ok {
					fail(path+".fields."+f, fmt.Errorf("unknown field type %q (string, number, bool, list, map or any)", spec.Fields[f]))
				}
				st.fields[f] = v
			}
		}
		wm := spec.Watermark
		if wm.MaxOutOfOrder < 0 {
			fail(path+".watermark.max_out_of_order", errors.New("must not be negative"))
		}
		idle := DefaultIdleAfter
		if wm.IdleAfter != nil {
			idle = *wm.IdleAfter
			if idle < 0 {
				fail(path+".watermark.idle_after", errors.New("must not be negative (0 means never idle)"))
			}
		}
		st.Watermark = stream.WatermarkConfig{MaxOutOfOrder: int64(wm.MaxOutOfOrder), IdleAfter: int64(idle)}
		skew := DefaultMaxFutureSkew
		if spec.MaxFutureSkew != nil {
			skew = *spec.MaxFutureSkew
			if skew < 0 {
				fail(path+".max_future_skew", errors.New("must not be negative (0 turns the check off)"))
			}
		}
		st.MaxFutureSkew = int64(skew)
		if spec.Retention != nil && *spec.Retention < 0 {
			fail(path+".retention", errors.New("must not be negative"))
		}
		if st.MaxFieldBytes == 0 {
			st.MaxFieldBytes = DefaultMaxFieldBytes
		} else if st.MaxFieldBytes < 0 {
			fail(path+".max_field_bytes", errors.New("must be positive"))
		}
		if st.MaxHistory == 0 {
			st.MaxHistory = DefaultMaxHistory
		} else if st.MaxHistory < 0 {
			fail(path+".max_history", errors.New("must be positive"))
		}

		if spec.Key == "" {
			fail(path+".key", errors.New("key is required: an expression giving the entity key, e.g. user_id"))
		}
		st.key = exprSource{src: string(spec.Key), path: path + ".key", scope: scopeRecord, stream: i}
		st.time = exprSource{src: string(cmpOr(spec.Time, "timestamp()")), path: path + ".time", scope: scopeRecord, stream: i}
		st.HasID = spec.ID != ""
		if spec.Decide != DecideNever && !st.HasID {
			fail(path+".id", errors.New("a deciding stream needs an id (the transaction id that keys its decisions)"))
		}
		st.id = exprSource{src: string(spec.ID), path: path + ".id", scope: scopeRecord, stream: i}
		for _, s := range []*exprSource{&st.key, &st.time, &st.id} {
			if s.src == "" {
				continue
			}
			s.kind = reflect.Interface
			s.field = bareField(s.src)
			if _, _, err := c.compile(s, &Context{}); err != nil {
				fail(s.path, err)
			}
		}
	}
}

func cmpOr[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bareField returns the field name when src is just an identifier.
func bareField(src string) string {
	src = strings.TrimSpace(src)
	switch src {
	case "true", "false", "nil", "timestamp":
		return ""
	}
	if identRE.MatchString(src) {
		return src
	}
	return ""
}

var aggRE = regexp.MustCompile(`^\s*([a-z_]+)\s*\(([\s\S]*)\)\s*$`)

func (c *compiler) compileWindows(fail func(string, error)) {
	rs, doc := c.rs, c.doc
	for _, name := range sortedNames(doc.Windows) {
		spec, path := doc.Windows[name], "windows."+name
		if spec == nil {
			fail(path, errors.New("window is empty"))
			continue
		}
		w := &Window{Name: name}
		idx, ok := rs.streamIndex[spec.Stream]
		if !ok {
			fail(path+".stream", unknownStream(spec.Stream, rs))
			continue
		}
		w.Stream = idx
		kinds := 0
		switch {
		case spec.Tumbling != nil:
			kinds++
			w.Spec = window.Spec{Kind: window.Tumbling, Size: int64(*spec.Tumbling)}
		case spec.Sliding != nil:
			kinds++
			w.Spec = window.Spec{Kind: window.Sliding, Size: int64(spec.Sliding.Size), Slide: int64(spec.Sliding.Slide)}
		case spec.Session != nil:
			kinds++
			w.Spec = window.Spec{Kind: window.Session, Gap: int64(spec.Session.Gap)}
		}
		if spec.Tumbling != nil && (spec.Sliding != nil || spec.Session != nil) || spec.Sliding != nil && spec.Session != nil {
			kinds++
		}
		if kinds != 1 {
			fail(path, errors.New("a window needs exactly one of tumbling, sliding or session"))
			continue
		}
		if w.Spec.Kind != window.Session {
			w.Spec.Offset = int64(spec.Offset)
		} else if spec.Offset != 0 {
			fail(path+".offset", errors.New("session windows have no offset"))
		}
		w.Spec.AllowedLateness = int64(spec.AllowedLateness)
		if err := w.Spec.Validate(); err != nil {
			fail(path, err)
		}
		if spec.Where != "" {
			w.where = &exprSource{src: string(spec.Where), path: path + ".where", scope: scopeEvent, stream: idx, kind: reflect.Bool}
			if _, _, err := c.compile(w.where, &Context{}); err != nil {
				fail(w.where.path, err)
			}
		}
		if len(spec.Aggregate) == 0 {
			fail(path+".aggregate", errors.New("a window needs at least one aggregate, e.g. {count: count()}"))
		}
		for _, an := range sortedNames(spec.Aggregate) {
			apath := path + ".aggregate." + an
			m := aggRE.FindStringSubmatchIndex(string(spec.Aggregate[an]))
			src := string(spec.Aggregate[an])
			if m == nil {
				fail(apath, fmt.Errorf("want an aggregate call such as count() or sum(amount), not %q", src))
				continue
			}
			fn, arg := src[m[2]:m[3]], src[m[4]:m[5]]
			kind, ok := window.ParseAggKind(fn)
			if !ok {
				fail(apath, fmt.Errorf("unknown aggregate %s() (count, sum, min, max, avg, count_distinct)", fn))
				continue
			}
			w.Aggs = append(w.Aggs, window.Aggregate{Name: an, Kind: kind})
			if kind == window.Count {
				if strings.TrimSpace(arg) != "" {
					fail(apath, errors.New("count() takes no argument (filter with the window's where)"))
				}
				w.args = append(w.args, nil)
				continue
			}
			s := &exprSource{src: arg, path: apath, scope: scopeEvent, stream: idx, kind: reflect.Interface, offset: m[4]}
			s.field = bareField(arg)
			if _, _, err := c.compile(s, &Context{}); err != nil {
				fail(apath, err)
			}
			w.args = append(w.args, s)
		}
		rs.Streams[idx].Windows = append(rs.Streams[idx].Windows, len(rs.Windows))
		rs.Windows = append(rs.Windows, w)
	}
}

func unknownStream(name string, rs *Ruleset) error {
	if name == "" {
		return errors.New("stream is required")
	}
	return fmt.Errorf("unknown stream %q (streams: %s)", name, strings.Join(sortedNames(rs.streamIndex), ", "))
}

var (
	actions = map[string]Action{"allow": Allow, "review": Review, "block": Block}
	modes   = map[string]Mode{"": Active, "active": Active, "shadow": Shadow, "disabled": Disabled, "draft": Draft}
)

func (c *compiler) compileRules(fail func(string, error)) {
	rs, doc := c.rs, c.doc
	for _, name := range sortedNames(doc.Rules) {
		spec, path := doc.Rules[name], "rules."+name
		if spec == nil {
			fail(path, errors.New("rule is empty"))
			continue
		}
		r := &Rule{Name: name, Score: spec.Score}
		idx, ok := rs.streamIndex[spec.Stream]
		if !ok {
			fail(path+".stream", unknownStream(spec.Stream, rs))
			continue
		}
		r.Stream = idx
		if rs.Streams[idx].Decide == DecideNever {
			fail(path+".stream", fmt.Errorf("stream %q is not decided (set decide: true on it): rules decide events", spec.Stream))
		}
		if r.Action, ok = actions[spec.Action]; !ok {
			fail(path+".action", fmt.Errorf("action must be allow, review or block, not %q", spec.Action))
		}
		if r.Mode, ok = modes[spec.Mode]; !ok {
			fail(path+".mode", fmt.Errorf("mode must be active, shadow, disabled or draft, not %q", spec.Mode))
		}
		if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) {
			fail(path+".score", errors.New("score must be a finite number"))
		}
		if spec.When == "" {
			fail(path+".when", errors.New("when is required: the condition under which the rule matches"))
			continue
		}
		r.when = exprSource{src: string(spec.When), path: path + ".when", scope: scopeRule, stream: idx, kind: reflect.Bool}
		var err error
		if _, r.when.refs, err = c.compile(&r.when, &Context{}); err != nil {
			fail(r.when.path, err)
		} else {
			r.features = ruleFeatures(&r.when)
		}
		if spec.Reason != "" {
			r.reason = &exprSource{src: string(spec.Reason), path: path + ".reason", scope: scopeRule, stream: idx, kind: reflect.Interface}
			if _, r.reason.refs, err = c.compile(r.reason, &Context{}); err != nil {
				fail(r.reason.path, err)
			}
		}
		if r.Mode == Active || r.Mode == Shadow {
			rs.Streams[idx].Rules = append(rs.Streams[idx].Rules, len(rs.Rules))
		}
		rs.Rules = append(rs.Rules, r)
	}
}

// deriveRetention sets each stream's retention from the history windows rules
// read, and checks explicit retentions against them.
func (c *compiler) deriveRetention(fail func(string, error)) {
	longest := make([]int64, len(c.rs.Streams))
	reader := make([]string, len(c.rs.Streams))
	fields := make([]map[string]bool, len(c.rs.Streams))
	wholeEvents := make([]bool, len(c.rs.Streams))
	for _, r := range c.rs.Rules {
		if r.Mode != Active && r.Mode != Shadow {
			continue
		}
		for _, s := range []*exprSource{&r.when, r.reason} {
			if s == nil {
				continue
			}
			names, whole := fieldsRead(s)
			for _, ref := range s.refs {
				if ref.window > longest[ref.stream] {
					longest[ref.stream], reader[ref.stream] = ref.window, s.path
				}
				if fields[ref.stream] == nil {
					fields[ref.stream] = map[string]bool{}
				}
				for _, n := range names {
					fields[ref.stream][n] = true
				}
				wholeEvents[ref.stream] = wholeEvents[ref.stream] || whole || s.kind != reflect.Bool
			}
		}
	}
	for i, st := range c.rs.Streams {
		spec := c.doc.Streams[st.Name]
		st.Retention = longest[i]
		if spec != nil && spec.Retention != nil {
			if r := int64(*spec.Retention); r < longest[i] {
				fail("streams."+st.Name+".retention", fmt.Errorf("retention %s is shorter than the %s of history read by %s",
					Duration(r), Duration(longest[i]), reader[i]))
			} else {
				st.Retention = r
			}
		}
		st.IDRetention = max(st.Retention, MinIDRetention)
		if !wholeEvents[i] && fields[i] != nil {
			st.HistoryFields = sortedNames(fields[i])
			if st.HistoryFields == nil {
				st.HistoryFields = []string{} // only counted, no field read
			}
		}
	}
}

// deriveDecodeFields sets each input stream's DecodeFields: the fields its
// expressions read (key, time, id, element predicates, windows, rules), the
// fields history keeps, and the one Mark keeps inline. Run after every
// expression is compiled, so that the element predicates are registered.
func (c *compiler) deriveDecodeFields() {
	for _, st := range c.rs.Streams {
		st.DecodeFields, st.BoundedFields = nil, nil
		if !st.Input() {
			continue
		}
		names, whole := map[string]bool{}, false
		read := func(s *exprSource) {
			if s == nil || s.src == "" {
				return
			}
			ids, env := identifiersRead(s.src)
			whole = whole || env
			for _, n := range ids {
				names[n] = true
			}
		}
		read(&st.key)
		read(&st.time)
		read(&st.id)
		for _, p := range st.predicates {
			read(p)
		}
		for _, w := range st.Windows {
			read(c.rs.Windows[w].where)
			for _, a := range c.rs.Windows[w].args {
				read(a)
			}
		}
		for _, r := range c.rs.Rules {
			if r.Stream == st.Index {
				read(&r.when)
				read(r.reason)
			}
		}
		for _, f := range st.HistoryFields {
			names[f] = true
		}
		if st.inlineField != "" {
			names[st.inlineField] = true
		}
		decodeAll := whole || len(st.Patterns) > 0 || len(st.Joins) > 0 || len(st.Enrichments) > 0 ||
			st.Decide == DecideWatermark || st.Retention > 0 && st.HistoryFields == nil
		if !decodeAll {
			st.DecodeFields = sortedNames(names)
		}
		// The bound applies to what pattern conditions and enrichment keys
		// name too (they see the whole event); a name that is a function or
		// a variable bounds nothing.
		for _, pi := range st.Patterns {
			for _, s := range append(append([]*exprSource(nil), c.rs.Patterns[pi].where...), c.rs.Patterns[pi].until...) {
				read(s)
			}
		}
		for _, ei := range st.Enrichments {
			read(&c.rs.Enrichments[ei].key)
		}
		st.BoundedFields = sortedNames(names)
	}
}
