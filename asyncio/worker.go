package asyncio

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// worker takes elements from o.work and runs their lookups until Close. With
// a Batcher it takes whatever else is already waiting, up to MaxBatch keys,
// and fetches them in one GetMany.
func (o *Operator) worker() {
	defer o.wg.Done()
	var batch []*entry
	var sc scratch
	for {
		select {
		case e := <-o.work:
			batch = append(batch[:0], e)
		case <-o.quit:
			return
		}
		if o.batcher != nil {
		fill:
			for len(batch) < MaxBatch {
				select {
				case e := <-o.work:
					batch = append(batch, e)
				default:
					break fill
				}
			}
		}
		o.run(batch, &sc)
		clear(batch)
	}
}

// scratch holds a worker's buffers, reused across lookups.
type scratch struct {
	keys []string
	vals []map[string]any
	errs []error
}

// run completes every entry of batch: attempts, then backoff and a new
// attempt for the retryable failures whose deadline leaves room, until each is
// a success or a fallback. On Close it returns with entries left incomplete;
// nobody reads them any more.
func (o *Operator) run(batch []*entry, sc *scratch) {
	for attempt := 0; ; attempt++ {
		earliest := batch[0].deadline
		sc.keys = sc.keys[:0]
		for _, e := range batch {
			earliest = minTime(earliest, e.deadline)
			sc.keys = append(sc.keys, e.key)
		}
		vals, errs := o.attempt(earliest, sc)

		delay := o.backoff(attempt)
		now := time.Now()
		retry := batch[:0] // filtered in place: the loop reads ahead of the writes
		for i, e := range batch {
			err := errs[i]
			switch {
			case err == nil:
				if o.cache != nil {
					o.cache.put(e.key, vals[i])
				}
				o.complete(e, vals[i], nil)
			case !now.Before(e.deadline):
				o.complete(e, nil, timeoutError(attempt+1, err))
			case attempt < o.cfg.Retries && retryable(err) && now.Add(delay).Before(e.deadline):
				retry = append(retry, e)
			default:
				o.complete(e, nil, err)
			}
		}
		clear(batch[len(retry):])
		clear(vals)
		clear(errs)
		if len(retry) == 0 {
			return
		}
		batch = retry
		o.retries.Add(int64(len(batch)))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-o.quit:
			t.Stop()
			return
		}
	}
}

// attempt runs one lookup round for sc.keys under a deadline (the earliest
// of the batch) and returns one value and one error per key.
func (o *Operator) attempt(deadline time.Time, sc *scratch) ([]map[string]any, []error) {
	keys := sc.keys
	ctx, cancel := context.WithDeadline(o.base, deadline)
	defer cancel()
	if o.batcher != nil && len(keys) > 1 {
		vals, errs := o.batcher.GetMany(ctx, keys)
		if len(vals) != len(keys) || len(errs) != len(keys) {
			err := fmt.Errorf("asyncio: batcher returned %d values and %d errors for %d keys", len(vals), len(errs), len(keys))
			vals, errs = make([]map[string]any, len(keys)), make([]error, len(keys))
			for i := range errs {
				errs[i] = err
			}
		}
		return vals, errs
	}
	v, err := o.lookup.Get(ctx, keys[0])
	sc.vals, sc.errs = append(sc.vals[:0], v), append(sc.errs[:0], err)
	return sc.vals, sc.errs
}

// backoff is the delay after attempt (0-based): Backoff doubled per attempt,
// minus a random jitter of up to half, so that retries of many elements that
// failed together spread out.
func (o *Operator) backoff(attempt int) time.Duration {
	d := o.cfg.Backoff << min(attempt, 20)
	if d <= 0 || d > o.cfg.Timeout {
		d = o.cfg.Timeout
	}
	return d - rand.N(d/2+1)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
