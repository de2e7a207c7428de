package asyncio

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Output is one result of an Operator, read from Results: either a watermark
// (Watermark true, WM set) or an element with its enrichment.
type Output struct {
	// Watermark marks a watermark output; only WM is set then.
	Watermark bool
	// WM is the watermark's value.
	WM int64
	// Element is the value given to Submit.
	Element any
	// Key is the lookup key given to Submit.
	Key string
	// Value is the enrichment: the lookup's result, or a copy of
	// Config.Fallback with "_error" set. Treat it as read-only: a looked-up
	// value may be shared with the cache and with other outputs of the key.
	Value map[string]any
	// Err is the reason the fallback was used (wrapping ErrTimeout,
	// ErrCircuitOpen or the lookup's last error); nil on success.
	Err error
}

// Stats is a snapshot of an Operator's counters.
type Stats struct {
	InFlight    int64 // elements accepted by Submit and not yet handed to the Results reader
	Completed   int64 // elements completed, with a looked-up value or a fallback
	Timeouts    int64 // fallbacks because the element's Timeout expired
	Fallbacks   int64 // all fallbacks, timeouts included
	Retries     int64 // attempts after an element's first
	CacheHits   int64
	CacheMisses int64
}

// Operator runs lookups for a stream of elements and hands back results in
// the configured order.
//
// Submit, SubmitWatermark and Drain are called by one goroutine (the task's
// feeder), in input order. Results is read by one goroutine, concurrently with
// the feeder; an unread Results channel eventually blocks Submit (capacity)
// and Drain. Stats and Close are safe from any goroutine. See the package
// documentation for goroutine ownership and the ordering invariants.
type Operator struct {
	lookup  Lookup
	batcher Batcher // lookup as a Batcher, or nil
	cfg     Config
	cache   *cache // nil: no cache

	slots   chan struct{} // capacity semaphore: a token per element not yet emitted
	work    chan *entry   // elements waiting for a worker; never holds more than Capacity
	wake    chan struct{} // nudges the emitter; capacity 1
	results chan Output   // unbuffered: a send means the reader has the output

	base      context.Context // parent of every lookup context; cancelled by Close
	cancel    context.CancelFunc
	quit      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu struct {
		sync.Mutex
		q       queue
		pending int             // submitted elements and watermarks not yet handed to the reader
		idle    []chan struct{} // Drain waiters, closed when pending reaches 0
	}

	inFlight, completed, timeouts, fallbacks, retries, hits, misses atomic.Int64
}

// New validates cfg and starts the operator's workers and emitter. lookup may
// also implement Batcher, in which case workers batch keys. Call Close to stop
// the goroutines.
func New(lookup Lookup, cfg Config) (*Operator, error) {
	if lookup == nil {
		return nil, errors.New("asyncio: nil lookup")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	batcher, _ := lookup.(Batcher)
	cfg = cfg.withDefaults(batcher != nil)
	o := &Operator{
		lookup:  lookup,
		batcher: batcher,
		cfg:     cfg,
		slots:   make(chan struct{}, cfg.Capacity),
		work:    make(chan *entry, cfg.Capacity),
		wake:    make(chan struct{}, 1),
		results: make(chan Output),
		quit:    make(chan struct{}),
	}
	if cfg.Cache > 0 {
		o.cache = newCache(cfg.Cache, cfg.CacheTTL, cfg.Clock)
	}
	if cfg.Ordered {
		o.mu.q = &orderedQueue{}
	} else {
		o.mu.q = &unorderedQueue{}
	}
	o.base, o.cancel = context.WithCancel(context.Background())
	o.wg.Add(cfg.Workers + 1)
	for range cfg.Workers {
		go o.worker()
	}
	go o.emitter()
	return o, nil
}

// Submit hands one element and its lookup key to the operator. It blocks while
// Capacity elements are in flight and returns ctx.Err() if ctx ends first, or
// ErrClosed after Close. The element's Timeout starts when Submit returns nil.
func (o *Operator) Submit(ctx context.Context, key string, element any) error {
	select {
	case <-o.quit:
		return ErrClosed
	default:
	}
	select {
	case o.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-o.quit:
		return ErrClosed
	}
	o.inFlight.Add(1)
	e := &entry{key: key, element: element, deadline: time.Now().Add(o.cfg.Timeout)}
	o.mu.Lock()
	o.mu.q.addElement(e)
	o.mu.pending++
	o.mu.Unlock()
	if o.cache != nil {
		if v, ok := o.cache.get(key); ok {
			o.hits.Add(1)
			o.complete(e, v, nil)
			return nil
		}
		o.misses.Add(1)
	}
	// Never blocks: every entry in work holds one of Capacity slots.
	o.work <- e
	return nil
}

// SubmitWatermark inserts a watermark after every element submitted so far. It
// does not block: a watermark directly behind another one that is not emitted
// yet replaces it (keeping the larger value). It returns ErrClosed after
// Close; ctx is accepted for symmetry with Submit.
func (o *Operator) SubmitWatermark(ctx context.Context, wm int64) error {
	select {
	case <-o.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	o.mu.Lock()
	if o.mu.q.addWatermark(wm) {
		o.mu.pending++
	}
	o.mu.Unlock()
	o.nudge()
	return nil
}

// Results returns the channel the owner drains. Each submitted element comes
// out exactly once, watermarks in their place (see the package
// documentation). It is closed when Close returns.
func (o *Operator) Results() <-chan Output { return o.results }

// Drain waits until every submitted element has completed (result or fallback
// after Timeout) and every output, watermarks included, has been handed to
// Results' reader: the checkpoint hook. After Drain returns nil nothing is in
// flight, provided the feeder does not Submit concurrently. Results must be
// read meanwhile. It returns ctx.Err() if ctx ends first, ErrClosed if the
// operator is closed.
func (o *Operator) Drain(ctx context.Context) error {
	o.mu.Lock()
	if o.mu.pending == 0 {
		o.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	o.mu.idle = append(o.mu.idle, ch)
	o.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-o.quit:
		return ErrClosed
	}
}

// Close stops the workers and the emitter, cancels running lookups and closes
// Results. Outputs not yet handed to the reader are dropped. Every goroutine
// the operator started has returned when Close returns. Close is idempotent
// and always returns nil.
func (o *Operator) Close() error {
	o.closeOnce.Do(func() {
		close(o.quit)
		o.cancel()
		o.wg.Wait()
		close(o.results)
	})
	return nil
}

// Stats returns the current counters; safe to call concurrently.
func (o *Operator) Stats() Stats {
	return Stats{
		InFlight:    o.inFlight.Load(),
		Completed:   o.completed.Load(),
		Timeouts:    o.timeouts.Load(),
		Fallbacks:   o.fallbacks.Load(),
		Retries:     o.retries.Load(),
		CacheHits:   o.hits.Load(),
		CacheMisses: o.misses.Load(),
	}
}

func (o *Operator) nudge() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// complete records the final result of e exactly once and lets the emitter
// see it. err != nil selects the fallback.
func (o *Operator) complete(e *entry, v map[string]any, err error) {
	if err != nil {
		fb := make(map[string]any, len(o.cfg.Fallback)+1)
		for k, x := range o.cfg.Fallback {
			fb[k] = x
		}
		fb["_error"] = reason(err)
		v = fb
		o.fallbacks.Add(1)
		if errors.Is(err, ErrTimeout) {
			o.timeouts.Add(1)
		}
	}
	o.completed.Add(1)
	o.mu.Lock()
	e.value, e.err, e.done = v, err, true
	o.mu.q.complete(e)
	o.mu.Unlock()
	o.nudge()
}

// emitter is the only sender on results. It frees an element's capacity slot
// only once the reader has the output, so completed results waiting for their
// turn count against Capacity and nothing queues beyond it.
func (o *Operator) emitter() {
	defer o.wg.Done()
	for {
		o.mu.Lock()
		out, ok := o.mu.q.pop()
		o.mu.Unlock()
		if !ok {
			select {
			case <-o.wake:
				continue
			case <-o.quit:
				return
			}
		}
		select {
		case o.results <- out:
		case <-o.quit:
			return
		}
		if !out.Watermark {
			o.inFlight.Add(-1)
			<-o.slots
		}
		o.handed()
	}
}

// handed updates the Drain bookkeeping after an output reached the reader.
func (o *Operator) handed() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mu.pending--
	if o.mu.pending == 0 {
		for _, ch := range o.mu.idle {
			close(ch)
		}
		o.mu.idle = nil
	}
}
