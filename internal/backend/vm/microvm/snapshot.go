package microvm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Snapshots. A booted microVM whose agent is ready is the same for every
// sandbox with the same launch (QEMU command line without the VM's own
// paths, and the same QEMU, kernel, initramfs and layer files): the first
// sandbox of a launch boots, and meanwhile another VM of that launch boots
// in the background, is settled (the agent's deferred module loads done),
// stopped and saved with QEMU's migration to a file. The next sandboxes of
// the launch start QEMU with the same command line and `-incoming` from
// that file instead of booting: no firmware, kernel or agent start-up, the
// guest wakes where the snapshot stopped it, with its own writable disk (a
// new swap area the snapshot never paged to) and its own state directory.
// The host then gives each clone its own identity (IDENT: host name,
// clock, fresh randomness mixed in and the generator reseeded).
//
// What clones still share with each other: the guest kernel's address
// layout (KASLR), /proc/sys/kernel/random/boot_id and the agent's own
// address space layout; nothing a sandbox's processes start with (each
// exec gets fresh randomness from the reseeded generator).

const (
	// DefaultMaxSnapshots is how many launches keep a snapshot (each the
	// guest's written memory, ~70 MB for a 512 MiB busybox guest).
	DefaultMaxSnapshots = 8
	// snapRetry is how long a launch whose snapshot failed waits before
	// another is tried.
	snapRetry = 10 * time.Minute
)

// snapStore keeps the snapshots of one driver's state directory.
type snapStore struct {
	dir    string
	max    int
	log    *slog.Logger
	mu     sync.Mutex
	busy   bool // a snapshot is being taken (one at a time)
	failed map[string]time.Time
	wg     sync.WaitGroup
}

func newSnapStore(dir string, max int, log *slog.Logger) *snapStore {
	if max <= 0 {
		max = DefaultMaxSnapshots
	}
	s := &snapStore{dir: dir, max: max, log: log, failed: map[string]time.Time{}}
	s.removeStale()
	return s
}

func (s *snapStore) path(key string) string { return filepath.Join(s.dir, key+".snap") }

// key names l's snapshot: a hash of QEMU's command line for l with the VM's
// own paths replaced, and of the identity (size, times, inode) of every file
// the guest's memory depends on. "" if a file cannot be looked at.
func (s *snapStore) key(d *Driver, l launch) string {
	t := l
	t.dir, t.disk = "/vm", "/vm/disk.raw"
	h := sha256.New()
	for _, a := range d.sandboxArgs(t) {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	for _, f := range append([]string{d.cfg.QEMU, d.kernel, d.initrd}, l.layers...) {
		fi, err := os.Stat(f)
		if err != nil {
			return ""
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st == nil {
			return ""
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d\x00", f, fi.Size(), fi.ModTime().UnixNano(), st.Ino, st.Ctim.Nano())
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// open returns key's snapshot, or nil when there is none.
func (s *snapStore) open(key string) *os.File {
	if key == "" {
		return nil
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(s.path(key), now, now) // most recently used: evicted last
	return f
}

// drop removes key's snapshot after a failed restore; the launch is not
// snapshotted again for snapRetry.
func (s *snapStore) drop(key string) {
	_ = os.Remove(s.path(key))
	s.mu.Lock()
	s.failed[key] = time.Now()
	s.mu.Unlock()
}

// buildLater takes l's snapshot in the background unless it exists, failed
// lately, or another snapshot is being taken.
func (s *snapStore) buildLater(d *Driver, key string, l launch) {
	s.mu.Lock()
	if _, err := os.Stat(s.path(key)); err == nil || s.busy || time.Since(s.failed[key]) < snapRetry {
		s.mu.Unlock()
		return
	}
	s.busy = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		t0 := time.Now()
		err := d.takeSnapshot(context.Background(), key, l)
		s.mu.Lock()
		s.busy = false
		if err != nil {
			s.failed[key] = time.Now()
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("microvm: snapshot failed; its launch keeps booting", "key", key, "err", err)
			return
		}
		s.log.Info("microvm: snapshot taken", "key", key, "took", time.Since(t0))
		s.evict()
	}()
}

// wait waits for the snapshots being taken.
func (s *snapStore) wait() { s.wg.Wait() }

// evict keeps the s.max most recently used snapshots.
func (s *snapStore) evict() {
	m, _ := filepath.Glob(filepath.Join(s.dir, "*.snap"))
	if len(m) <= s.max {
		return
	}
	type snap struct {
		p string
		t time.Time
	}
	var all []snap
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil {
			all = append(all, snap{p, fi.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.After(all[j].t) })
	for _, sn := range all[min(s.max, len(all)):] {
		_ = os.Remove(sn.p)
	}
}

// removeStale removes what a process that died while taking a snapshot
// left (a partial file, the snapshot VM's directory); another driver on the
// same directory may be taking one now, so only what is older than a boot.
func (s *snapStore) removeStale() {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 2*BootTimeout {
			_ = os.RemoveAll(filepath.Join(s.dir, e.Name()))
		}
	}
}

// takeSnapshot boots a VM of launch l, lets its agent settle, stops it and
// saves it to key's snapshot file.
func (d *Driver) takeSnapshot(ctx context.Context, key string, l launch) error {
	if err := os.MkdirAll(d.snaps.dir, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(d.snaps.dir, "vm") // short: socket paths are < 108 bytes
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l.dir, l.disk, l.logPath, l.identHost = dir, filepath.Join(dir, "disk.raw"), filepath.Join(dir, "qemu.log"), ""
	l.transient = true
	if err := makeDisk(ctx, l.disk, l.diskBytes); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	in, err := d.launchVM(ctx, "snapshot-"+key, d.Accel(ctx), l, nil, newTimeline())
	if err != nil {
		return err
	}
	defer in.Destroy(context.WithoutCancel(ctx))
	if r, err := in.call(ctx, initproto.NewPacket("SETTLE")); err != nil {
		return err
	} else if r.Op != "OK" {
		return replyErr("settle", r)
	}
	q, err := in.qmpConn(ctx)
	if err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := d.snaps.path(key) + ".tmp" + hex.EncodeToString(rnd[:])
	// QEMU writes the stream to a file this process opens and hands it:
	// its seccomp filter refuses spawning a helper (exec:cat), and as an
	// unprivileged user it could not create a file in the snapshot store.
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return errdefs.Internal(err, "microvm: snapshot")
	}
	defer os.Remove(tmp)
	err = q.SendFD(ctx, "snapshot", out)
	out.Close()
	if err != nil {
		return errdefs.Internal(err, "microvm: snapshot: getfd")
	}
	for _, c := range []struct {
		cmd  string
		args any
	}{
		{"stop", nil},
		// Unlimited: the guest is stopped, nothing is gained by pacing.
		{"migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}},
		{"migrate", map[string]any{"uri": "fd:snapshot"}},
	} {
		if _, err := q.Execute(ctx, c.cmd, c.args); err != nil {
			return errdefs.Internal(err, "microvm: snapshot: %s", c.cmd)
		}
	}
	for {
		raw, err := q.Execute(ctx, "query-migrate", nil)
		if err != nil {
			return errdefs.Internal(err, "microvm: snapshot: query-migrate")
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return errdefs.Internal(err, "microvm: snapshot: query-migrate")
		}
		switch st.Status {
		case "completed":
			if err := os.Rename(tmp, d.snaps.path(key)); err != nil {
				return errdefs.Internal(err, "microvm: snapshot")
			}
			return nil
		case "failed", "cancelled":
			return errdefs.Internal(nil, "microvm: snapshot: migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "microvm: snapshot")
		case <-in.done:
			return errdefs.New(api.CodeSandboxGone, "microvm: snapshot: qemu exited")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WaitSnapshots waits until the snapshots being taken in the background are
// taken (or failed).
func (d *Driver) WaitSnapshots() { d.snaps.wait() }

// Restored reports whether the sandbox was restored from a snapshot rather
// than booted.
func (in *instance) Restored() bool { return in.restored }
