package container

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// IDPool is the host uid/gid range sandboxes in user namespaces get their
// IDs from: sandbox i of the pool maps its 0..Step-1 to Base+i*Step...
// Every sandbox gets a range of its own (not one per node): host objects
// keyed by uid (per-user keyrings, RLIMIT_NPROC counts, files a sandbox
// could reach through a shared mount) are then never shared between two
// sandboxes.
type IDPool struct {
	Base, Step uint32 // default 1<<20 and 65536
	Count      int    // ranges; default 4096
}

func (p IDPool) withDefaults() IDPool {
	if p.Base == 0 {
		p.Base = 1 << 20
	}
	if p.Step == 0 {
		p.Step = 65536
	}
	if p.Count == 0 {
		p.Count = 4096
	}
	return p
}

// idAlloc hands out ranges of an IDPool; the base of a sandbox's range is
// in its driver state, and Recover marks it taken again after a restart.
type idAlloc struct {
	pool IDPool
	mu   sync.Mutex
	used map[uint32]string // range base -> sandbox id
	next int
}

func newIDAlloc(p IDPool) (*idAlloc, error) {
	p = p.withDefaults()
	if p.Base == 0 || p.Step == 0 || uint64(p.Base)+uint64(p.Step)*uint64(p.Count) > 1<<32-1 {
		return nil, fmt.Errorf("container: id pool %d+%d*%d does not fit in 32 bits", p.Base, p.Count, p.Step)
	}
	return &idAlloc{pool: p, used: map[uint32]string{}}, nil
}

func (a *idAlloc) alloc(id string) (initproto.IDMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; i < a.pool.Count; i++ {
		n := (a.next + i) % a.pool.Count
		base := a.pool.Base + uint32(n)*a.pool.Step
		if _, ok := a.used[base]; !ok {
			a.used[base] = id
			a.next = n + 1
			return initproto.IDMap{HostID: base, Size: a.pool.Step}, nil
		}
	}
	return initproto.IDMap{}, errdefs.New(api.CodeResourceExhausted, "container: all %d user-namespace id ranges are in use", a.pool.Count)
}

// mark records a range a recovered sandbox holds.
func (a *idAlloc) mark(base uint32, id string) {
	if base == 0 {
		return
	}
	a.mu.Lock()
	a.used[base] = id
	a.mu.Unlock()
}

func (a *idAlloc) free(base uint32, id string) {
	if base == 0 {
		return
	}
	a.mu.Lock()
	if a.used[base] == id {
		delete(a.used, base)
	}
	a.mu.Unlock()
}

// searchable makes dir traversable by others (0711) and reports an error if
// one of its ancestors is not: the init of a sandbox in a user namespace
// resolves its own binary, root and writable-layer paths as an unprivileged
// host uid.
func searchable(dir string, chmod bool) error {
	if chmod {
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
	}
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by others (mode %o); a sandbox init in a user namespace cannot reach %s", p, st.Mode().Perm(), dir)
		}
		if p == "/" {
			return nil
		}
	}
}

// usesUserNS reports whether a sandbox gets a user namespace: its request's
// choice, else the driver's default.
func (d *Driver) usesUserNS(id string, req *bool) bool {
	if d.weaken != nil && d.weaken(id).userns {
		return false
	}
	if req != nil {
		return *req
	}
	return d.cfg.UserNS
}
