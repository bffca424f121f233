package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ForkOptions configure `dsec bench fork`.
type ForkOptions struct {
	Options
	Count int // children (default 16)
	MB    int // MB the parent writes to its writable layer first (default 200)
}

// ForkResult is the outcome of `dsec bench fork`.
type ForkResult struct {
	Count     int    `json:"count"`
	ParentMB  int    `json:"parent_written_mb"`
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
	// SnapshotMs is the copy of the parent's writable layer (parent frozen),
	// once per fork; ForkMs the whole fork call (copy + every child started).
	SnapshotMs    float64 `json:"snapshot_ms"`
	SnapshotBytes int64   `json:"snapshot_bytes"`
	ForkMs        float64 `json:"fork_ms"`
	// Child is per child: its start (the gap between successive children's
	// creation times, the first counted from the end of the copy) plus its
	// first exec (`true`) answered.
	Child     Latencies `json:"child"`
	ChildExec Latencies `json:"child_first_exec"`
	// AllAnsweredMs: from the fork call to the last child's first exec answered.
	AllAnsweredMs float64 `json:"all_answered_ms"`
	// BytesPerChild is host memory in use without page cache (usedNoCache)
	// after the fork and the execs, minus before, over Count;
	// PlainBytesPerSandbox the same for Count plain new sandboxes in the same
	// run, for comparison. On a shared machine both carry others' noise.
	BytesPerChild        int64 `json:"bytes_per_child"`
	PlainBytesPerSandbox int64 `json:"plain_bytes_per_sandbox"`
	// CgroupBytesPerChild is what the children's memory cgroups are charged on
	// average (init, their page tables, their writable layer, page cache they
	// were first to read); CgroupBytesPerPlain the same for plain sandboxes.
	CgroupBytesPerChild int64 `json:"cgroup_bytes_per_child"`
	CgroupBytesPerPlain int64 `json:"cgroup_bytes_per_plain"`
	// SlabBytesPerChild / SlabBytesPerPlain: the kernel slab part of the host figures.
	SlabBytesPerChild int64 `json:"slab_bytes_per_child"`
	SlabBytesPerPlain int64 `json:"slab_bytes_per_plain"`
	Targets           struct {
		ChildP50Ms    float64 `json:"child_p50_ms"`
		BytesPerChild int64   `json:"bytes_per_child"`
	} `json:"targets"`
}

// loadavgText is the host's 1, 5 and 15 minute load averages.
func loadavgText() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Fork benchmarks fork for GRPO groups: a parent writes MB to its layer, then
// forks Count children, each of which must answer an exec.
func Fork(ctx context.Context, o ForkOptions) (ForkResult, error) {
	o.defaults()
	if o.Count <= 0 {
		o.Count = 16
	}
	if o.MB <= 0 {
		o.MB = 200
	}
	res := ForkResult{Count: o.Count, ParentMB: o.MB, LoadStart: loadavgText()}
	res.Targets.ChildP50Ms, res.Targets.BytesPerChild = 20, 2<<20
	d, cleanup, err := openNode(ctx, o.Options)
	if err != nil {
		return res, err
	}
	defer cleanup()
	m := d.Manager
	small := api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 256 << 20, DiskBytes: int64(o.MB+64) << 20}
	p, err := m.Create(ctx, small)
	if err != nil {
		return res, err
	}
	files := (o.MB + 9) / 10
	script := fmt.Sprintf("mkdir /data && for i in $(seq %d); do head -c 10485760 /dev/urandom > /data/f$i; done", files)
	if r, err := m.Exec(ctx, p.ID, api.ExecRequest{Shell: script, TimeoutMs: 300_000}); err != nil || r.ExitCode != 0 {
		return res, fmt.Errorf("parent write: %v %s", err, r.Stderr)
	}

	// Plain sandboxes first, for the memory comparison.
	plain, plainCg, plainSlab, err := memoryOf(ctx, o.Count, func() ([]string, error) {
		var ids []string
		for i := 0; i < o.Count; i++ {
			sb, err := m.Create(ctx, small)
			if err != nil {
				return ids, err
			}
			ids = append(ids, sb.ID)
		}
		return ids, answer(ctx, d, ids, nil)
	}, d)
	if err != nil {
		return res, err
	}
	res.PlainBytesPerSandbox, res.CgroupBytesPerPlain, res.SlabBytesPerPlain = plain, plainCg, plainSlab

	var fr api.ForkResult
	var execs []time.Duration
	var t0 time.Time
	res.BytesPerChild, res.CgroupBytesPerChild, res.SlabBytesPerChild, err = memoryOf(ctx, o.Count, func() ([]string, error) {
		t0 = time.Now()
		fr, err = m.Fork(ctx, p.ID, api.ForkRequest{Count: o.Count})
		if err != nil {
			return nil, err
		}
		res.ForkMs = ms(time.Since(t0))
		var ids []string
		for _, c := range fr.Children {
			ids = append(ids, c.ID)
		}
		err := answer(ctx, d, ids, &execs)
		res.AllAnsweredMs = ms(time.Since(t0))
		return ids, err
	}, d)
	if err != nil {
		return res, err
	}
	res.SnapshotMs, res.SnapshotBytes = fr.SnapshotMillis, fr.SnapshotBytes
	prev := t0.Add(time.Duration(fr.SnapshotMillis * float64(time.Millisecond)))
	var per []time.Duration
	for i, c := range fr.Children {
		per = append(per, c.CreatedAt.Sub(prev)+execs[i])
		prev = c.CreatedAt
	}
	res.Child, res.ChildExec = summarize(per), summarize(execs)
	res.LoadEnd = loadavgText()
	return res, nil
}

// answer runs `true` in each sandbox in turn; lat, if set, gets each latency.
func answer(ctx context.Context, d *daemon.Daemon, ids []string, lat *[]time.Duration) error {
	for _, id := range ids {
		t := time.Now()
		r, err := d.Manager.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
		if err != nil || r.ExitCode != 0 {
			return fmt.Errorf("exec in %s: %v (exit %d)", id, err, r.ExitCode)
		}
		if lat != nil {
			*lat = append(*lat, time.Since(t))
		}
	}
	return nil
}

// memoryOf measures host memory in use before and after fn (which creates
// n sandboxes and returns their IDs) and what their memory cgroups are
// charged, deletes them and returns both per sandbox. Dirty page cache is
// written back first (a fork's copy of the parent's layer is clean,
// reclaimable cache afterwards).
func memoryOf(ctx context.Context, n int, fn func() ([]string, error), d *daemon.Daemon) (host, cg, slab int64, err error) {
	unix.Sync()
	time.Sleep(300 * time.Millisecond)
	u0, s0, err := usedNoCache()
	if err != nil {
		return 0, 0, 0, err
	}
	ids, err := fn()
	if err == nil {
		unix.Sync()
		time.Sleep(time.Second) // deferred kernel work settles
		var u1, s1 int64
		if u1, s1, err = usedNoCache(); err == nil {
			host, slab = (u1-u0)/int64(n), (s1-s0)/int64(n)
		}
		for _, id := range ids {
			cg += cgroupMemory(id) / int64(n)
		}
	}
	for _, id := range ids {
		err = errors.Join(err, d.Manager.Delete(ctx, id))
	}
	return host, cg, slab, err
}

// usedNoCache is host memory in use without the page cache and reclaimable
// slab (free(1)'s "used": MemTotal - MemFree - Buffers - Cached - SReclaimable
// + Shmem, tmpfs counted), and the slab: a fork's copy of the parent's layer
// is file cache on disk and must not count as the children's.
func usedNoCache() (int64, int64, error) {
	m, err := meminfo()
	if err != nil {
		return 0, 0, err
	}
	return m["MemTotal"] - m["MemFree"] - m["Buffers"] - m["Cached"] - m["SReclaimable"] + m["Shmem"], m["Slab"], nil
}

// cgroupMemory is the memory charged to sandbox id's cgroup (v2
// memory.current or v1 memory.usage_in_bytes), 0 if not found.
func cgroupMemory(id string) int64 {
	for _, pat := range []string{"/sys/fs/cgroup/dsec-*/" + id + "/memory.current", "/sys/fs/cgroup/memory/dsec-*/" + id + "/memory.usage_in_bytes"} {
		ms, _ := filepath.Glob(pat)
		for _, p := range ms {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	return 0
}

// CommitOptions configure `dsec bench commit`.
type CommitOptions struct {
	Options
	MB int // MB the sandbox installs before the commit (default 300)
}

// CommitResult is the outcome of `dsec bench commit`.
type CommitResult struct {
	InstalledMB int    `json:"installed_mb"`
	LoadStart   string `json:"loadavg_start"`
	LoadEnd     string `json:"loadavg_end"`
	// BaseMs is the first commit on the node (an empty writable layer): it
	// also builds the directory image's base layer once.
	BaseMs float64 `json:"first_commit_with_base_build_ms"`
	// CommitMs is the commit of the sandbox that installed InstalledMB (plus
	// 50 MB of caches the default exclude list leaves out).
	CommitMs     float64 `json:"commit_ms"`
	LayerBytes   int64   `json:"layer_bytes"`
	ContentBytes int64   `json:"content_bytes"`
	Entries      int     `json:"entries"`
	Excluded     int     `json:"excluded"`
	// FreshCreateMs: a second node (fresh data dir, the same blob store) that
	// never saw the environment creates a sandbox on it; FreshExecMs its first
	// exec, which reads an installed file (lazily fetched).
	FreshCreateMs float64 `json:"fresh_node_create_ms"`
	FreshExecMs   float64 `json:"fresh_node_first_exec_ms"`
}

// Commit benchmarks commit (pack_diff) and a create from the result on a node
// that never saw it.
func Commit(ctx context.Context, o CommitOptions) (res CommitResult, err error) {
	o.defaults()
	if o.MB <= 0 {
		o.MB = 300
	}
	res = CommitResult{InstalledMB: o.MB, LoadStart: loadavgText()}
	scratch, err := os.MkdirTemp("/var/lib/dsec", "bench-commit-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(scratch)
	dirA, dirB := scratch+"/a", scratch+"/b"
	a, stopA, err := openLayeredNode(ctx, o.Options, dirA, "")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stopA()) }()
	m := a.Manager
	req := api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 512 << 20, DiskBytes: int64(o.MB+128) << 20}
	empty, err := m.Create(ctx, req)
	if err != nil {
		return res, err
	}
	r0, err := m.Commit(ctx, empty.ID, api.CommitRequest{Name: "bench-base"})
	if err != nil {
		return res, err
	}
	res.BaseMs = r0.Millis
	sb, err := m.Create(ctx, req)
	if err != nil {
		return res, err
	}
	script := fmt.Sprintf(`mkdir -p /opt/pkg /root/.cache/pip && for i in $(seq %d); do
		mkdir /opt/pkg/d$i && head -c 10485760 /dev/urandom > /opt/pkg/d$i/lib.so &&
		for j in $(seq 20); do echo "module $i $j" > /opt/pkg/d$i/m$j.py; done; done &&
		for i in $(seq 5); do head -c 10485760 /dev/urandom > /root/.cache/pip/w$i; done`, (o.MB+9)/10)
	if r, err := m.Exec(ctx, sb.ID, api.ExecRequest{Shell: script, TimeoutMs: 600_000}); err != nil || r.ExitCode != 0 {
		return res, fmt.Errorf("install: %v %s", err, r.Stderr)
	}
	cr, err := m.Commit(ctx, sb.ID, api.CommitRequest{Name: "bench-env"})
	if err != nil {
		return res, err
	}
	res.CommitMs, res.LayerBytes, res.ContentBytes = cr.Millis, cr.Layer.Size, cr.ContentBytes
	res.Entries, res.Excluded = cr.Entries, cr.Excluded

	// A node that never saw it: its own data dir, node A's blob store.
	blobSpec := "dir:" + paths.New(dirA).Blobs()
	b, stopB, err := openLayeredNode(ctx, o.Options, dirB, blobSpec)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stopB()) }()
	es, err := envstore.Open(paths.New(dirB).EnvStore(), nil)
	if err != nil {
		return res, err
	}
	es.Spec = blobSpec
	var toolkits []string
	for _, l := range cr.Image.Layers[1:] {
		toolkits = append(toolkits, l.Digest)
	}
	if _, err := es.Compose(ctx, "bench-env", cr.Image.Layers[0].Digest, toolkits, ""); err != nil {
		return res, err
	}
	t := time.Now()
	fresh, err := b.Manager.Create(ctx, api.CreateSandboxRequest{Image: "bench-env"})
	if err != nil {
		return res, err
	}
	res.FreshCreateMs = ms(time.Since(t))
	t = time.Now()
	r, err := b.Manager.Exec(ctx, fresh.ID, api.ExecRequest{Shell: "cat /opt/pkg/d1/m1.py && test ! -e /root/.cache/pip"})
	if err != nil || r.ExitCode != 0 || r.Stdout != "module 1 1\n" {
		return res, fmt.Errorf("sandbox on the committed environment: %v %q %s", err, r.Stdout, r.Stderr)
	}
	res.FreshExecMs = ms(time.Since(t))
	res.LoadEnd = loadavgText()
	return res, nil
}

// openLayeredNode starts a node on dataDir (blob store blobSpec, "" = its
// own) whose cleanup also checks that layerd and its mounts are gone.
func openLayeredNode(ctx context.Context, o Options, dataDir, blobSpec string) (*daemon.Daemon, func() error, error) {
	d, err := daemon.New(ctx, daemon.Config{DataDir: dataDir, DefaultImage: o.Image, Logger: o.Logger, Token: "bench", BlobStore: blobSpec})
	if err != nil {
		return nil, nil, err
	}
	return d, func() error {
		root := d.Layers.Root()
		pid, _ := d.Layers.Running(context.Background())
		err := d.Shutdown(context.Background(), true)
		if pid != 0 {
			err = errors.Join(err, checkLayerdGone(root, pid))
		}
		return err
	}, nil
}
