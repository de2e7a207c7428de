package asyncio

import (
	"sync"
	"time"
)

// breaker is a consecutive-failure circuit breaker. Closed: calls pass and
// failures are counted; threshold consecutive failures open it. Open: calls
// fail fast until coolDown has passed. Then half-open: exactly one call (the
// probe) passes; its success closes the breaker, its failure opens it again.
// Safe for concurrent use.
type breaker struct {
	threshold int
	coolDown  time.Duration
	now       func() time.Time
	mu        struct {
		sync.Mutex
		failures  int
		openUntil time.Time // zero: closed
		probing   bool
	}
}

// allow reports whether a call may go ahead. A true result must be followed
// by exactly one done.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.openUntil.IsZero() {
		return true
	}
	if b.mu.probing || b.now().Before(b.mu.openUntil) {
		return false
	}
	b.mu.probing = true
	return true
}

// done records the outcome of an allowed call.
func (b *breaker) done(failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := b.mu.probing
	b.mu.probing = false
	if !failed {
		b.mu.failures, b.mu.openUntil = 0, time.Time{}
		return
	}
	b.mu.failures++
	if wasProbe || b.mu.failures >= b.threshold {
		b.mu.openUntil = b.now().Add(b.coolDown)
	}
}
