package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/seccomp"
)

// Work is what each peer container gets so that it does the work a dsec
// sandbox's create does: an overlay root (the same read-only lower directory,
// a writable layer on a size-limited tmpfs), a cgroup with the same limits,
// dsec's seccomp profile, new pid, ipc, uts, mount, network and cgroup
// namespaces, an idle init.
type Work struct {
	Rootfs      string  // the image's lower directory
	MemoryBytes int64   // memory limit
	DiskBytes   int64   // size of the tmpfs writable layer
	CPU         float64 // CPU quota in cores
	PidsMax     int64
}

// Describe lists the work one container create does, for reports.
func (w Work) Describe(r Runtime, notes []string) []string {
	out := []string{
		fmt.Sprintf("tmpfs writable layer (size=%d MiB) + overlay mount over %s", w.DiskBytes>>20, w.Rootfs),
		"config.json written per container",
		fmt.Sprintf("%s run --detach: cgroup (memory %d MiB, cpu %.2g cores, pids %d), dsec's seccomp profile, pid/ipc/uts/mount/net/cgroup namespaces, idle init (sleep infinity)",
			r.Name, w.MemoryBytes>>20, w.CPU, w.PidsMax),
	}
	if needsHybridWorkaround(r) {
		out = append(out, "runs in a private mount namespace without "+unifiedCgroup+" (crun rejects this hybrid cgroup host otherwise)")
	}
	return append(out, notes...)
}

// Session runs create and delete operations of one runtime, one container at
// a time per call, so a benchmark can interleave them with dsec's. Container
// i always runs on worker i % workers: its overlay is mounted, the runtime
// started and the container torn down on the same OS thread, which (for crun
// on a hybrid cgroup host) has its own mount namespace.
type Session struct {
	r       Runtime
	w       Work
	spec    OCISpec
	Notes   []string // what the seccomp translation left out
	dir     string
	b       *bench
	parent  string // cgroup parent of this session's containers
	prefix  string
	workers []chan func()
	wg      sync.WaitGroup
	mu      sync.Mutex
	up      map[int]bool // containers created and not yet deleted
}

// Open prepares a session of workers threads.
func (r Runtime) Open(w Work, workers int) (*Session, error) {
	sec, notes, err := SeccompFrom(seccomp.Default())
	if err != nil {
		return nil, err
	}
	// A cgroup per container: crun too (Find disables its cgroups for the
	// old benchmark; in the mount namespace without the cgroup2 hierarchy,
	// cgroupfs works).
	extra := make([]string, 0, len(r.ExtraArgs))
	for _, a := range r.ExtraArgs {
		if a == "--cgroup-manager=disabled" {
			a = "--cgroup-manager=cgroupfs"
		}
		extra = append(extra, a)
	}
	r.ExtraArgs = extra
	dir, err := os.MkdirTemp("", "dsec-peer-"+r.Name+"-")
	if err != nil {
		return nil, err
	}
	s := &Session{r: r, w: w, Notes: notes, dir: dir, up: map[int]bool{},
		prefix: fmt.Sprintf("dsec-peer-%s-%d-%d", r.Name, os.Getpid(), time.Now().UnixNano()%1e9)}
	s.parent = "/" + s.prefix
	s.b = &bench{r: r, work: dir, state: filepath.Join(dir, "state"), bundle: dir, hideCgroup2: needsHybridWorkaround(r)}
	if err := os.Mkdir(s.b.state, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.spec = Spec("root", "dsec-peer")
	s.spec.Root.Readonly = false // the overlay's upper layer is the writable layer
	s.spec.Linux.Namespaces = append(s.spec.Linux.Namespaces, OCINamespace{Type: "cgroup"})
	s.spec.Linux.Resources = &OCIResources{
		Memory: &OCIMemory{Limit: w.MemoryBytes},
		CPU:    &OCICPU{Quota: int64(w.CPU * 100000), Period: 100000},
		Pids:   &OCIPids{Limit: w.PidsMax},
	}
	s.spec.Linux.Seccomp = sec
	ready := make(chan error, workers)
	for range max(workers, 1) {
		ch := make(chan func())
		s.workers = append(s.workers, ch)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if s.b.hideCgroup2 {
				// The thread is never unlocked: it is discarded with its
				// mount namespace when this goroutine exits.
				if err := hideUnifiedCgroup(); err != nil {
					ready <- err
					for range ch {
					}
					return
				}
			}
			ready <- nil
			for f := range ch {
				f()
			}
		}()
	}
	for range s.workers {
		if err := <-ready; err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Session) id(i int) string { return s.prefix + "-" + strconv.Itoa(i) }

// on runs f on container i's worker and waits for it.
func (s *Session) on(i int, f func() error) error {
	done := make(chan error, 1)
	s.workers[i%len(s.workers)] <- func() { done <- f() }
	return <-done
}

// Create makes and starts container i: the timed operation.
func (s *Session) Create(ctx context.Context, i int) error {
	return s.on(i, func() error {
		c := filepath.Join(s.dir, "c"+strconv.Itoa(i))
		rw, root := filepath.Join(c, "rw"), filepath.Join(c, "root")
		if err := os.MkdirAll(rw, 0o700); err != nil {
			return err
		}
		if err := os.Mkdir(root, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", rw, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", s.w.DiskBytes)); err != nil {
			return fmt.Errorf("peer: mount the writable layer: %w", err)
		}
		s.mark(i, true)
		for _, d := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(rw, d), 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", s.w.Rootfs, rw, rw)
		if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
			return fmt.Errorf("peer: mount the overlay root: %w", err)
		}
		spec := s.spec
		linux := spec.Linux
		linux.CgroupsPath = s.parent + "/" + s.id(i)
		spec.Linux = linux
		cfg, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c, "config.json"), cfg, 0o644); err != nil {
			return err
		}
		return s.b.run(ctx, "run", "--detach", "--bundle", c, s.id(i))
	})
}

func (s *Session) mark(i int, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if up {
		s.up[i] = true
	} else {
		delete(s.up, i)
	}
}

// Delete stops and removes container i and unmounts its root.
func (s *Session) Delete(ctx context.Context, i int) error {
	return s.on(i, func() error {
		err := s.b.run(ctx, "delete", "--force", s.id(i))
		c := filepath.Join(s.dir, "c"+strconv.Itoa(i))
		for _, m := range []string{"root", "rw"} {
			if uerr := syscall.Unmount(filepath.Join(c, m), syscall.MNT_DETACH); uerr != nil && !errors.Is(uerr, syscall.EINVAL) {
				err = errors.Join(err, fmt.Errorf("peer: unmount %s: %w", m, uerr))
			}
		}
		if rerr := os.RemoveAll(c); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err == nil {
			s.mark(i, false)
		}
		return err
	})
}

// Close deletes every container still up, removes the session's cgroups and
// files and ends its workers.
func (s *Session) Close() error {
	s.mu.Lock()
	var left []int
	for i := range s.up {
		left = append(left, i)
	}
	s.mu.Unlock()
	var errs []error
	ctx := context.Background()
	for _, i := range left {
		if err := s.Delete(ctx, i); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ch := range s.workers {
		close(ch)
	}
	s.wg.Wait()
	if err := removeCgroups(s.prefix); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func unmountDetach(path string) error { return syscall.Unmount(path, syscall.MNT_DETACH) }
