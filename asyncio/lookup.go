package asyncio

import (
	"context"
	"errors"
	"fmt"
)

// Lookup fetches the enrichment for one key. Implementations: Redis (GET of a
// JSON value, or HGETALL) and HTTP (GET/POST with the key in a URL template).
//
// Get must honour ctx's deadline: the Operator relies on it to bound every
// attempt, and a Get that ignores ctx holds a worker and a capacity slot until
// it returns. Get is called concurrently from the Operator's workers. The
// returned map is handed to the Results reader and may be kept in the cache, so
// it must not be modified afterwards by either side. An error marked with
// Permanent is not retried.
type Lookup interface {
	Get(ctx context.Context, key string) (map[string]any, error)
}

// Batcher is optionally implemented by lookups that can fetch several keys in
// one round trip (Redis pipelining). GetMany returns one value and one error
// per key, in the order of keys; both slices have len(keys) elements. The same
// rules as for Lookup.Get apply to ctx, concurrency and the returned maps.
type Batcher interface {
	GetMany(ctx context.Context, keys []string) ([]map[string]any, []error)
}

// LookupFunc adapts a plain function to Lookup, the way http.HandlerFunc
// adapts a function to http.Handler (for in-process enrichments).
type LookupFunc func(ctx context.Context, key string) (map[string]any, error)

// Get calls f(ctx, key).
func (f LookupFunc) Get(ctx context.Context, key string) (map[string]any, error) {
	return f(ctx, key)
}

// ErrTimeout is wrapped by Output.Err when an element's Timeout expired before
// any attempt succeeded.
var ErrTimeout = errors.New("asyncio: lookup timed out")

// ErrCircuitOpen is returned by Redis while its circuit breaker is open (or
// half-open with its probe already running). It is not retried.
var ErrCircuitOpen = errors.New("asyncio: circuit breaker open")

// ErrClosed is returned by Submit, SubmitWatermark and Drain after Close.
var ErrClosed = errors.New("asyncio: operator closed")

// PermanentError marks a lookup error that retrying cannot fix (a 4xx
// response, a value that is not a JSON object, a body over the size cap).
type PermanentError struct{ Err error }

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the Operator does not retry it. Permanent(nil)
// is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// retryable is the one classifier of lookup errors: everything is retried
// except permanent errors, an open circuit (retrying would defeat the fast
// fallback) and cancellation (the operator is closing).
func retryable(err error) bool {
	var p *PermanentError
	switch {
	case errors.As(err, &p), errors.Is(err, ErrCircuitOpen), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// reason is the short text stored under "_error" in a fallback value.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrCircuitOpen):
		return "circuit open"
	}
	return err.Error()
}

// timeoutError builds the Output.Err of an element whose deadline passed.
func timeoutError(attempts int, last error) error {
	if last == nil {
		return fmt.Errorf("%w (%d attempts)", ErrTimeout, attempts)
	}
	return fmt.Errorf("%w (%d attempts): %w", ErrTimeout, attempts, last)
}
