package asyncio

import (
	"errors"
	"fmt"
	"time"
)

// DefaultCapacity is the Capacity used when Config.Capacity is 0 (Flink's
// default queue capacity).
const DefaultCapacity = 100

// DefaultBackoff is the first retry delay used when Config.Backoff is 0.
const DefaultBackoff = 10 * time.Millisecond

// MaxBatch is the most keys a worker hands to Batcher.GetMany at once.
const MaxBatch = 64

// Config configures an Operator. The zero value of each optional field selects
// the documented default; New validates it with Validate.
type Config struct {
	// Timeout covers all attempts of one element, measured from the moment
	// Submit accepted it (Flink: first invocation to final completion). When it
	// expires the element completes with Fallback. Required (> 0).
	Timeout time.Duration
	// Capacity is the maximum number of elements accepted by Submit and not yet
	// handed to the Results reader (in flight or completed but waiting for
	// their turn). A full operator blocks Submit (backpressure); nothing is
	// queued beyond it. 0 means DefaultCapacity.
	Capacity int
	// Retries is the number of extra attempts after the first, with
	// exponential backoff and jitter, all within Timeout. An attempt is not
	// started if its backoff would end after the deadline.
	Retries int
	// Backoff is the delay before the first retry; it doubles for each further
	// retry and a random jitter of up to half of it is subtracted. 0 means
	// DefaultBackoff.
	Backoff time.Duration
	// Ordered emits results in input order; otherwise results are emitted as
	// they complete, but never across a watermark.
	Ordered bool
	// Cache is the number of LRU entries for successful lookups; 0 disables
	// the cache.
	Cache int
	// CacheTTL is how long a cached value stays valid; 0 means until evicted.
	CacheTTL time.Duration
	// Fallback is the value used when the lookup fails or times out; the
	// output value is a copy of it with "_error" set to the reason
	// ("timeout", "circuit open" or the error text). nil means an empty map.
	Fallback map[string]any
	// Clock reads the time for the cache TTL; nil means time.Now. Deadlines
	// always use the real clock because contexts do.
	Clock func() time.Time
	// Workers is the number of goroutines that run lookups. 0 means Capacity
	// for a plain Lookup (every in-flight element gets its own call) and
	// min(Capacity, 8) for a Batcher (each worker sends up to MaxBatch keys
	// per round trip).
	Workers int
}

// Validate reports every invalid field, joined in one error.
func (c Config) Validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout must be > 0, got %v", c.Timeout))
	}
	if c.Capacity < 0 {
		errs = append(errs, fmt.Errorf("capacity must be >= 0, got %d", c.Capacity))
	}
	if c.Retries < 0 {
		errs = append(errs, fmt.Errorf("retries must be >= 0, got %d", c.Retries))
	}
	if c.Backoff < 0 {
		errs = append(errs, fmt.Errorf("backoff must be >= 0, got %v", c.Backoff))
	}
	if c.Cache < 0 {
		errs = append(errs, fmt.Errorf("cache must be >= 0, got %d", c.Cache))
	}
	if c.CacheTTL < 0 {
		errs = append(errs, fmt.Errorf("cache TTL must be >= 0, got %v", c.CacheTTL))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers must be >= 0, got %d", c.Workers))
	}
	if len(errs) > 0 {
		return fmt.Errorf("asyncio config: %w", errors.Join(errs...))
	}
	return nil
}

// withDefaults returns c with the defaults of zero fields filled in.
func (c Config) withDefaults(batcher bool) Config {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Workers == 0 {
		c.Workers = c.Capacity
		if batcher {
			c.Workers = min(c.Capacity, 8)
		}
	}
	c.Workers = min(c.Workers, c.Capacity)
	return c
}
