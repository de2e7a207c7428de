package asyncio

import (
	"container/list"
	"sync"
	"time"
)

// cache is an LRU of successful lookup results with an optional TTL. It is
// safe for concurrent use: Submit reads it, workers fill it.
type cache struct {
	size  int
	ttl   time.Duration
	clock func() time.Time
	mu    struct {
		sync.Mutex
		order *list.List // of *cacheEntry, most recently used first
		byKey map[string]*list.Element
	}
}

type cacheEntry struct {
	key     string
	value   map[string]any
	expires time.Time // zero: no TTL
}

func newCache(size int, ttl time.Duration, clock func() time.Time) *cache {
	c := &cache{size: size, ttl: ttl, clock: clock}
	c.mu.order = list.New()
	c.mu.byKey = make(map[string]*list.Element, size)
	return c
}

// get returns the cached value of key if present and not expired.
func (c *cache) get(key string) (map[string]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.mu.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !e.expires.IsZero() && !c.clock().Before(e.expires) {
		c.mu.order.Remove(el)
		delete(c.mu.byKey, key)
		return nil, false
	}
	c.mu.order.MoveToFront(el)
	return e.value, true
}

// put stores value under key, evicting the least recently used entry when full.
func (c *cache) put(key string, value map[string]any) {
	var expires time.Time
	if c.ttl > 0 {
		expires = c.clock().Add(c.ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.byKey[key]; ok {
		e := el.Value.(*cacheEntry)
		e.value, e.expires = value, expires
		c.mu.order.MoveToFront(el)
		return
	}
	if c.mu.order.Len() >= c.size {
		last := c.mu.order.Back()
		c.mu.order.Remove(last)
		delete(c.mu.byKey, last.Value.(*cacheEntry).key)
	}
	c.mu.byKey[key] = c.mu.order.PushFront(&cacheEntry{key: key, value: value, expires: expires})
}
