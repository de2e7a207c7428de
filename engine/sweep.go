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
type sweepQueue struct {
	buckets map[int64][]*keyState
	order   bucketHeap // the bucket numbers in buckets
}

// touch moves ks's last event time to ts when that is later, listing it in
// the bucket of ts. Every key is touched when it is made, so that every key
// is listed somewhere.
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
	q.buckets[ks.bucket][ks.slot-1] = nil
	ks.slot = 0
}

// due calls drop for every key listed in a bucket that ends at or before
// horizon (all its events are older), oldest bucket first, and forgets those
// buckets.
func (q *sweepQueue) due(horizon int64, drop func(*keyState)) {
	for len(q.order) > 0 {
		b := q.order[0]
		if b >= bucketOf(horizon) { // bucket b ends at or after horizon (no overflow near the extremes)
			return
		}
		heap.Pop(&q.order)
		for _, ks := range q.buckets[b] {
			if ks != nil {
				ks.slot = 0
				drop(ks)
			}
		}
		delete(q.buckets, b)
	}
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
