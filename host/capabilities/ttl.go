package capabilities

import (
	"sync"
	"time"
)

// ttlCache keeps successful answers for a while, bounded in entries: when
// full, expired entries are swept, and if none expired the new answer is not
// kept.
type ttlCache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[string]ttlEntry
}

type ttlEntry struct {
	exp time.Time
	b   []byte
}

func newTTLCache(ttl time.Duration, max int, now func() time.Time) *ttlCache {
	return &ttlCache{ttl: ttl, max: max, now: now, m: map[string]ttlEntry{}}
}

func (c *ttlCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	if c.now().After(e.exp) {
		delete(c.m, key)
		return nil, false
	}
	return e.b, true
}

func (c *ttlCache) put(key string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if now.After(e.exp) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			return
		}
	}
	c.m[key] = ttlEntry{exp: now.Add(c.ttl), b: b}
}
