package lazy

import (
	"container/list"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
)

// chunkKey names one chunk of one blob.
type chunkKey struct {
	hex string
	idx int64
}

// Cache is the node's bounded on-disk chunk cache: DIR/<blob hex>/<chunk index>, one
// file per chunk (written to a temp name and renamed, so a crash never leaves a torn
// chunk). When the total passes Limit the least recently used chunks are removed; a
// removed chunk is fetched again on its next miss (the kernel page cache above the
// erofs mount keeps hot data anyway, so the disk cache mostly serves re-mounts and
// page-cache misses).
type Cache struct {
	dir   string
	limit int64

	mu      sync.Mutex
	lru     *list.List // front = most recently used; values chunkKey
	entries map[chunkKey]*list.Element
	sizes   map[chunkKey]int64
	total   int64
	evicted int64
}

// NewCache opens (and re-indexes) a cache directory.
func NewCache(dir string, limit int64) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, limit: limit, lru: list.New(), entries: map[chunkKey]*list.Element{}, sizes: map[chunkKey]int64{}}
	// Re-index what a previous layerd left, oldest first.
	type old struct {
		k    chunkKey
		size int64
		mt   int64
	}
	var olds []old
	blobs, _ := os.ReadDir(dir)
	for _, b := range blobs {
		if !b.IsDir() {
			continue
		}
		ents, _ := os.ReadDir(filepath.Join(dir, b.Name()))
		for _, e := range ents {
			idx, err := strconv.ParseInt(e.Name(), 10, 64)
			if err != nil {
				if len(e.Name()) > 0 && e.Name()[0] == '.' {
					_ = os.Remove(filepath.Join(dir, b.Name(), e.Name()))
				}
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			olds = append(olds, old{chunkKey{b.Name(), idx}, fi.Size(), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(olds, func(i, j int) bool { return olds[i].mt > olds[j].mt })
	for _, o := range olds {
		c.entries[o.k] = c.lru.PushBack(o.k)
		c.sizes[o.k] = o.size
		c.total += o.size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *Cache) path(k chunkKey) string {
	return filepath.Join(c.dir, k.hex, strconv.FormatInt(k.idx, 10))
}

// ReadAt reads from a cached chunk into p at off within the chunk; ok is false on a
// miss.
func (c *Cache) ReadAt(k chunkKey, p []byte, off int64) (n int, ok bool) {
	c.mu.Lock()
	e := c.entries[k]
	if e != nil {
		c.lru.MoveToFront(e)
	}
	c.mu.Unlock()
	if e == nil {
		return 0, false
	}
	f, err := os.Open(c.path(k))
	if err != nil {
		c.drop(k)
		return 0, false
	}
	defer f.Close()
	n, err = f.ReadAt(p, off)
	if err != nil && n < len(p) {
		// Shorter than asked: only fine at the blob's end, which the caller bounds.
		if n == 0 {
			return 0, false
		}
	}
	return n, true
}

// Has reports whether a chunk is cached.
func (c *Cache) Has(k chunkKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[k] != nil
}

// Put stores a chunk and evicts cold chunks past the limit.
func (c *Cache) Put(k chunkKey, data []byte) error {
	dir := filepath.Join(c.dir, k.hex)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	tmp.Close()
	if err := os.Rename(tmp.Name(), c.path(k)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[k]; e != nil {
		c.lru.MoveToFront(e)
		c.total -= c.sizes[k]
	} else {
		c.entries[k] = c.lru.PushFront(k)
	}
	c.sizes[k] = int64(len(data))
	c.total += int64(len(data))
	c.evictLocked()
	return nil
}

func (c *Cache) evictLocked() {
	for c.limit > 0 && c.total > c.limit && c.lru.Len() > 1 {
		e := c.lru.Back()
		k := e.Value.(chunkKey)
		c.removeLocked(k)
		_ = os.Remove(c.path(k))
		c.evicted++
	}
}

func (c *Cache) removeLocked(k chunkKey) {
	if e := c.entries[k]; e != nil {
		c.lru.Remove(e)
		delete(c.entries, k)
		c.total -= c.sizes[k]
		delete(c.sizes, k)
	}
}

func (c *Cache) drop(k chunkKey) {
	c.mu.Lock()
	c.removeLocked(k)
	c.mu.Unlock()
	_ = os.Remove(c.path(k))
}

// HasBlob reports whether any chunk of a blob is cached.
func (c *Cache) HasBlob(hex string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.entries {
		if k.hex == hex {
			return true
		}
	}
	return false
}

// DropBlob removes every cached chunk of a blob (a blob found corrupt).
func (c *Cache) DropBlob(hex string) {
	c.mu.Lock()
	for k := range c.entries {
		if k.hex == hex {
			c.removeLocked(k)
		}
	}
	c.mu.Unlock()
	_ = os.RemoveAll(filepath.Join(c.dir, hex))
}

// CacheStats describes the cache.
type CacheStats struct {
	Bytes   int64 `json:"bytes"`
	Limit   int64 `json:"limit_bytes"`
	Chunks  int   `json:"chunks"`
	Evicted int64 `json:"evicted_chunks"`
}

// Stats returns the cache's totals.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Bytes: c.total, Limit: c.limit, Chunks: c.lru.Len(), Evicted: c.evicted}
}
