package engine

import "container/heap"

// sweepEvery is how much event time passes between sweeps of idle keys, and
// the width of the sweep queue's buckets.
const sweepEvery = 60_000

// sweepQueue finds the keys to forget without walking every key. Each key is
// listed in the bucket of its last event time (sweepEvery wide); a key whose
// last event time moves to a later bucket is listed again there, and its
// entry in the earlier bucket is cleared. Once the watermark has passed a
// bucket by the longest retention, every event of its keys is expired: the
// sweep drops those keys. Before it, a sweep walked every key each minute of
// event time, which cost about 5% of a replay and paused a live task for as
// long as the walk took.
//
// A key knows its entry (keyState.slot), so that one leaving the task
// another way (frozen: cold.go) leaves no pointer to its state behind.
//
// A sweep in slices (Task.sweep) takes the buckets due out of the queue at
// once (owe) and drops their keys a few at a time (forget): a key listed
// later, even in an old bucket (a late event), is listed afresh and waits
// for the next sweep, as it would after a sweep at once.
type sweepQueue struct {
	buckets map[int64][]*keyState
	order   bucketHeap // the bucket numbers in buckets

	// The buckets owed, taken out of buckets and order by owe, oldest
	// first; forget has dropped the first next keys of the first.
	owed      map[int64][]*keyState
	owedOrder []int64
	next      int
}

// touch moves ks's last event time to ts when that is later, listing it in
// the bucket of ts. Every key is touched when it is made, so that every key
// is listed somewhere. A key owed to a sweep must be dropped first
// (Task.owedSweep).
func (q *sweepQueue) touch(ks *keyState, ts int64) {
	if ks.slot > 0 && ts <= ks.lastTime {
		return
	}
	ks.lastTime = max(ks.lastTime, ts)
	b := bucketOf(ks.lastTime)
	if ks.slot > 0 {
		if b == ks.bucket {
			return
		}
		q.unlist(ks)
	}
	if q.buckets == nil {
		q.buckets = make(map[int64][]*keyState)
	}
	list, ok := q.buckets[b]
	if !ok {
		heap.Push(&q.order, b)
	}
	ks.bucket, ks.slot = b, int32(len(list)+1)
	q.buckets[b] = append(list, ks)
}

// unlist clears ks's entry, which it must have.
func (q *sweepQueue) unlist(ks *keyState) {
	if q.owes(ks) {
		q.owed[ks.bucket][ks.slot-1] = nil
	} else {
		q.buckets[ks.bucket][ks.slot-1] = nil
	}
	ks.slot = 0
}

// due calls drop for every key listed in a bucket that ends at or before
// horizon (all its events are older), oldest bucket first, and forgets those
// buckets.
func (q *sweepQueue) due(horizon int64, drop func(*keyState)) {
	q.owe(horizon)
	q.forget(drop, nil)
}

// owe takes the buckets that end at or before horizon out of the queue, for
// forget to drop their keys.
func (q *sweepQueue) owe(horizon int64) {
	for len(q.order) > 0 {
		b := q.order[0]
		if b >= bucketOf(horizon) { // bucket b ends at or after horizon (no overflow near the extremes)
			return
		}
		heap.Pop(&q.order)
		if q.owed == nil {
			q.owed = make(map[int64][]*keyState)
		}
		if owed, ok := q.owed[b]; ok {
			// Still owed to the sweep before, and listed afresh since (late
			// events): in which order keys go does not matter, only when.
			for _, ks := range q.buckets[b] {
				if ks != nil {
					owed = append(owed, ks)
					ks.slot = int32(len(owed))
				}
			}
			q.owed[b] = owed
		} else {
			q.owed[b] = q.buckets[b]
			q.owedOrder = append(q.owedOrder, b)
		}
		delete(q.buckets, b)
	}
}

// forget calls drop for the keys of the buckets owed, oldest first, until
// none is left or more (asked before each key; nil: go on) reports false;
// it reports whether none is left.
func (q *sweepQueue) forget(drop func(*keyState), more func() bool) bool {
	for len(q.owedOrder) > 0 {
		b := q.owedOrder[0]
		list := q.owed[b]
		for ; q.next < len(list); q.next++ {
			ks := list[q.next]
			if ks == nil {
				continue
			}
			if more != nil && !more() {
				return false
			}
			list[q.next] = nil
			ks.slot = 0
			drop(ks)
		}
		q.next = 0
		delete(q.owed, b)
		q.owedOrder = q.owedOrder[1:]
	}
	q.owedOrder = nil
	return true
}

// owing reports whether forget has keys left to drop.
func (q *sweepQueue) owing() bool { return len(q.owedOrder) > 0 }

// owes reports whether ks is listed in a bucket owed to a sweep: one that
// ends before the horizon of a sweep that forget has not finished.
func (q *sweepQueue) owes(ks *keyState) bool {
	if !q.owing() || ks.slot == 0 {
		return false
	}
	// A bucket of the same number may be listed afresh (a late event):
	// the entry tells which list holds ks.
	list, ok := q.owed[ks.bucket]
	return ok && int(ks.slot) <= len(list) && list[ks.slot-1] == ks
}

// bucketOf is ts's bucket: floor(ts / sweepEvery).
func bucketOf(ts int64) int64 {
	b := ts / sweepEvery
	if ts%sweepEvery < 0 {
		b--
	}
	return b
}

// bucketHeap is a min-heap of bucket numbers.
type bucketHeap []int64

func (h bucketHeap) Len() int           { return len(h) }
func (h bucketHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h bucketHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *bucketHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *bucketHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
