package api

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/service"
)

// Documents are edited and compared as rulesdoc trees: an item edit is
// the current document parsed, the item set or removed, and the result
// re-encoded (rulesdoc.Document.Encode); the audit log and item histories
// compare rulesdoc indexes.

// withName returns item with its name added, as the API shows items.
func withName(name string, item map[string]any) map[string]any {
	out := make(map[string]any, len(item)+1)
	maps.Copy(out, item)
	out["name"] = name
	return out
}

// versionCache keeps the indexes of recent versions: versions are
// immutable, and listings would otherwise parse every document each time.
type versionCache struct {
	mu struct {
		sync.Mutex
		m    map[string]*rulesdoc.Index // number/digest -> index
		fifo []string
	}
	size int
}

const versionCacheSize = 512

func (c *versionCache) init(size int) {
	c.size = size
	c.mu.m = make(map[string]*rulesdoc.Index, size)
}

func (c *versionCache) get(v *service.Version) *rulesdoc.Index {
	if v == nil {
		return &rulesdoc.Index{Items: map[string]map[string]json.RawMessage{}}
	}
	key := strconv.FormatInt(v.Number, 10) + "/" + v.Digest
	c.mu.Lock()
	ix, ok := c.mu.m[key]
	c.mu.Unlock()
	if ok {
		return ix
	}
	ix = rulesdoc.BuildIndex(v.Document) // outside the lock: parsing is the slow part
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.m[key]; !ok {
		if len(c.mu.fifo) >= c.size {
			delete(c.mu.m, c.mu.fifo[0])
			c.mu.fifo = c.mu.fifo[1:]
		}
		c.mu.m[key] = ix
		c.mu.fifo = append(c.mu.fifo, key)
	}
	return ix
}

// newestFirst pages versions (oldest first, as Backend.Versions gives
// them) newest first: at most limit of those numbered below before (0:
// from the newest). next is the before of the next page, 0 at the end.
func newestFirst(vs []*service.Version, before int64, limit int) (page []int, next int64) {
	for i := len(vs) - 1; i >= 0; i-- {
		if before > 0 && vs[i].Number >= before {
			continue
		}
		if len(page) == limit {
			return page, vs[page[len(page)-1]].Number
		}
		page = append(page, i)
	}
	return page, 0
}

// sortVersions orders versions oldest first (a Backend should already).
func sortVersions(vs []*service.Version) {
	slices.SortStableFunc(vs, func(a, b *service.Version) int { return cmp.Compare(a.Number, b.Number) })
}
