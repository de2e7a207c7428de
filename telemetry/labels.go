package telemetry

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxLabelSets bounds the distinct label sets of one instrument. Every
// label here comes from a small fixed set (streams, rules, routes, kinds),
// so reaching it means a caller passed something unbounded, such as a user
// key: further values are folded into one series whose labels are all
// overflowValue instead of growing memory and the series count without
// bound. It stays under the SDK's own cardinality limit (2000 per
// instrument), so the SDK's overflow series never appears first.
const maxLabelSets = 1000

// overflowValue is the value of every label of the overflow series.
const overflowValue = "other"

// series is one label set of one instrument: the label set converted once
// into every option slice the OTel API takes, so that a measurement passes a
// cached slice and allocates nothing (a variadic slice built at the call
// site escapes through the interface method and is allocated on every
// call), and, for the counters this package sums itself, the running total.
type series struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
	n   atomic.Int64
}

func newSeries(kvs ...attribute.KeyValue) *series {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return &series{
		add: []metric.AddOption{o},
		rec: []metric.RecordOption{o},
		obs: []metric.ObserveOption{o},
	}
}

// labelCache maps a label key (a string, an int, or a small struct of them)
// to its series. Reads are lock-free: the map is copy-on-write behind an
// atomic pointer, so the hot path is one atomic load and one map lookup with
// no allocation and no shared write. A miss takes mu, copies the map with
// the new entry and publishes it; misses happen once per distinct label set,
// and the copies are bounded by maxLabelSets.
type labelCache[K comparable] struct {
	m            atomic.Pointer[map[K]*series]
	build        func(K) []attribute.KeyValue
	overflow     *series
	overflowUsed atomic.Bool
	mu           sync.Mutex // serialises misses
}

// newLabelCache returns a cache whose label sets are build(k); names are the
// label names, used for the overflow series.
func newLabelCache[K comparable](build func(K) []attribute.KeyValue, names ...string) *labelCache[K] {
	kvs := make([]attribute.KeyValue, len(names))
	for i, n := range names {
		kvs[i] = attribute.String(n, overflowValue)
	}
	c := &labelCache[K]{build: build, overflow: newSeries(kvs...)}
	c.m.Store(&map[K]*series{})
	return c
}

// get returns k's series. Safe for concurrent use.
func (c *labelCache[K]) get(k K) *series {
	m := *c.m.Load()
	if s, ok := m[k]; ok {
		return s
	}
	if len(m) >= maxLabelSets {
		c.overflowUsed.Store(true)
		return c.overflow
	}
	return c.miss(k)
}

func (c *labelCache[K]) miss(k K) *series {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if s, ok := old[k]; ok {
		return s // another goroutine added it
	}
	if len(old) >= maxLabelSets {
		c.overflowUsed.Store(true)
		return c.overflow
	}
	next := make(map[K]*series, len(old)+1)
	for key, s := range old {
		next[key] = s
	}
	s := newSeries(c.build(k)...)
	next[k] = s
	c.m.Store(&next)
	return s
}

// each calls f for every series handed out so far. Safe for concurrent use
// with get; a series added meanwhile may be missed.
func (c *labelCache[K]) each(f func(*series)) {
	for _, s := range *c.m.Load() {
		f(s)
	}
	if c.overflowUsed.Load() {
		f(c.overflow)
	}
}

// stringCache is a labelCache of one string label.
func stringCache(name string) *labelCache[string] {
	return newLabelCache(func(v string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String(name, v)}
	}, name)
}

// pair is the key of a two-label cache.
type pair struct{ a, b string }

// pairCache is a labelCache of two string labels.
func pairCache(a, b string) *labelCache[pair] {
	return newLabelCache(func(k pair) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String(a, k.a), attribute.String(b, k.b)}
	}, a, b)
}

// noLabels is the key of an instrument without labels.
type noLabels struct{}

// unlabelled is a labelCache with the one empty label set, created at once
// so that the instrument is reported (as 0) before its first measurement.
func unlabelled() *labelCache[noLabels] {
	c := newLabelCache(func(noLabels) []attribute.KeyValue { return nil })
	c.get(noLabels{})
	return c
}

// counter is a counter or up-down counter that this package sums itself:
// an add is an atomic add on the cached series' total, and the totals are
// handed to an observable instrument when the reader collects (on every
// scrape). This keeps the OTel SDK's per-measurement work (attribute set
// resolution and lookup, about 100 ns) off the hot path: an add costs the
// label lookup and one atomic add.
type counter[K comparable] struct {
	labels *labelCache[K]
	inst   metric.Int64Observable   // reports the total as is
	finst  metric.Float64Observable // or: the total is nanoseconds, reported in seconds
}

func (c *counter[K]) add(k K, n int64) { c.labels.get(k).n.Add(n) }

func (c *counter[K]) observe(o metric.Observer) {
	c.labels.each(func(s *series) {
		if c.finst != nil {
			o.ObserveFloat64(c.finst, float64(s.n.Load())/1e9, s.obs...)
			return
		}
		o.ObserveInt64(c.inst, s.n.Load(), s.obs...)
	})
}

// observable is what NewMetrics' collection callback walks.
type observable interface {
	observe(metric.Observer)
}
