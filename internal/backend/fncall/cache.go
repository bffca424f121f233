package fncall

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// compileCache keeps compile results on the host, keyed by the content hash of
// (image, language, compiler command, sources): the same program compiles once.
// Compile errors are cached too (they are as deterministic as successes);
// infrastructure failures are not.
type compileCache struct {
	dir string

	mu       sync.Mutex
	inflight map[string]*flight
	mem      sync.Map // key -> cacheEntry already read from disk (entries never change)

	// bins keeps the most recently run binaries open (a run reads its
	// binary with an explicit offset, so runs share a descriptor).
	bmu   sync.Mutex
	bins  map[string]*openBin
	btick uint64
}

// openBin is an open cached binary; refs counts runs using it.
type openBin struct {
	f       *os.File
	refs    int
	used    uint64
	evicted bool
}

// maxOpenBins bounds the binaries compileCache keeps open.
const maxOpenBins = 64

// openBin returns binary path opened for reading, shared with other runs, and
// the function to call when the run no longer needs it.
func (c *compileCache) openBin(path string) (*os.File, func(), error) {
	c.bmu.Lock()
	b, ok := c.bins[path]
	if !ok {
		c.bmu.Unlock()
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		c.bmu.Lock()
		if b, ok = c.bins[path]; ok { // opened meanwhile
			f.Close()
		} else {
			b = &openBin{f: f}
			c.evictBinsLocked()
			if c.bins == nil {
				c.bins = map[string]*openBin{}
			}
			c.bins[path] = b
		}
	}
	c.btick++
	b.refs++
	b.used = c.btick
	c.bmu.Unlock()
	return b.f, func() {
		c.bmu.Lock()
		b.refs--
		if b.evicted && b.refs == 0 {
			b.f.Close()
		}
		c.bmu.Unlock()
	}, nil
}

// evictBinsLocked makes room for one more open binary: it drops the least
// recently used one (closed once no run uses it).
func (c *compileCache) evictBinsLocked() {
	if len(c.bins) < maxOpenBins {
		return
	}
	var lru string
	for p, b := range c.bins {
		if lru == "" || b.used < c.bins[lru].used {
			lru = p
		}
	}
	b := c.bins[lru]
	delete(c.bins, lru)
	b.evicted = true
	if b.refs == 0 {
		b.f.Close()
	}
}

// close closes the open binaries (the engine is closing: no runs are left).
func (c *compileCache) close() {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	for p, b := range c.bins {
		b.f.Close()
		delete(c.bins, p)
	}
}

type flight struct {
	done  chan struct{}
	entry cacheEntry
	err   error
}

// cacheEntry is DIR/KEY/meta.json; the binary is DIR/KEY/bin.
type cacheEntry struct {
	OK       bool    `json:"ok"`
	Output   string  `json:"output,omitempty"`
	ExitCode int     `json:"exit_code"`
	WallMs   float64 `json:"wall_ms"`
	CPUMs    float64 `json:"cpu_ms"`
	Message  string  `json:"message,omitempty"`
	bin      string
}

func newCompileCache(dir string) (*compileCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fncall: compile cache: %w", err)
	}
	return &compileCache{dir: dir, inflight: map[string]*flight{}}, nil
}

func (c *compileCache) load(key string) (cacheEntry, bool) {
	if v, ok := c.mem.Load(key); ok {
		return v.(cacheEntry), true
	}
	d := filepath.Join(c.dir, key)
	b, err := os.ReadFile(filepath.Join(d, "meta.json"))
	if err != nil {
		return cacheEntry{}, false
	}
	var e cacheEntry
	if json.Unmarshal(b, &e) != nil {
		return cacheEntry{}, false
	}
	if e.OK {
		e.bin = filepath.Join(d, "bin")
		if _, err := os.Stat(e.bin); err != nil {
			return cacheEntry{}, false
		}
	}
	c.mem.Store(key, e)
	return e, true
}

// get returns the entry for key, running build (once, however many callers ask
// at the same time) when it is not cached. build returns the entry and, when
// OK, the binary.
func (c *compileCache) get(key string, build func() (cacheEntry, []byte, error)) (cacheEntry, bool, error) {
	if e, ok := c.load(key); ok {
		return e, true, nil
	}
	c.mu.Lock()
	if f, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		<-f.done
		return f.entry, true, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.inflight[key] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, key)
		c.mu.Unlock()
		close(f.done)
	}()
	e, bin, err := build()
	if err != nil {
		f.err = err
		return e, false, err
	}
	f.entry, f.err = c.store(key, e, bin)
	return f.entry, false, f.err
}

func (c *compileCache) store(key string, e cacheEntry, bin []byte) (cacheEntry, error) {
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return e, fmt.Errorf("fncall: compile cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if e.OK {
		if err := os.WriteFile(filepath.Join(tmp, "bin"), bin, 0o755); err != nil {
			return e, fmt.Errorf("fncall: compile cache: %w", err)
		}
	}
	b, _ := json.Marshal(e)
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), b, 0o644); err != nil {
		return e, fmt.Errorf("fncall: compile cache: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return e, err
	}
	final := filepath.Join(c.dir, key)
	if err := os.Rename(tmp, final); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return e, fmt.Errorf("fncall: compile cache: %w", err)
	}
	if got, ok := c.load(key); ok {
		return got, nil
	}
	return e, errors.New("fncall: compile cache: entry vanished")
}

func isNotEmpty(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && (le.Err.Error() == "directory not empty" || le.Err.Error() == "file exists")
}
