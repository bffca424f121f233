package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// memcg names the memory controller's files on this host: cgroup v1
// (/sys/fs/cgroup/memory) or v2 (/sys/fs/cgroup with memory enabled).
type memcg struct{ root, limit, usage string }

func hostMemcg(t *testing.T) memcg {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return memcg{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(b), "memory") {
		return memcg{"/sys/fs/cgroup", "memory.max", "memory.current"}
	}
	t.Fatal("no memory cgroup controller (v1 /sys/fs/cgroup/memory or v2 with memory enabled)")
	return memcg{}
}

func writeCg(t *testing.T, dir, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
		t.Fatalf("write %s/%s = %s: %v", dir, file, v, err)
	}
}

func readCgInt(t *testing.T, dir, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChaosNodeOOM runs the server in a memory cgroup of its own (512 MiB)
// and gives the node's sandboxes a memory limit of their own (the parent
// cgroup of every sandbox: the node's memory, never the host's). Four
// neighbours hold 40 MiB each, within their 64 MiB limits; then one sandbox
// allocates past what the node has left. The kernel's OOM killer kills in that
// sandbox only: its exec is answered as the task's failure (oom_killed, exit
// 137, not an infrastructure error); the neighbours keep their memory and
// answer, the server keeps serving and creating.
func TestChaosNodeOOM(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	mc := hostMemcg(t)
	serverCg, err := os.MkdirTemp(mc.root, "dsec-e2e-oom-server-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the server has stopped (cleanups run last-in first-out)
		if err := os.Remove(serverCg); err != nil {
			t.Errorf("remove the server's cgroup: %v", err)
		}
	})
	writeCg(t, serverCg, mc.limit, strconv.Itoa(512<<20))
	n, base := startChaosNode(t, "")
	writeCg(t, serverCg, "cgroup.procs", strconv.Itoa(n.cmd.Process.Pid))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var neighbours []string
	for range 4 {
		id := n.create(t, api.CreateSandboxRequest{MemoryBytes: 64 << 20})
		if _, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", bench.MemHoldScript(40, 4096)}}); err != nil {
			t.Fatal(err)
		}
		neighbours = append(neighbours, id)
	}
	sums := map[string]string{}
	for _, id := range neighbours {
		if !testwait.Until(60*time.Second, func() bool { sums[id] = n.sh(t, id, "cat /tmp/sum1 2>/dev/null").Stdout; return sums[id] != "" }) {
			t.Fatalf("neighbour %s never held its memory", id)
		}
	}
	// The node's memory: what its sandboxes use now and 128 MiB more.
	nodeCg := filepath.Join(mc.root, "dsec-"+nodeTag(n.dataDir))
	used := readCgInt(t, nodeCg, mc.usage)
	writeCg(t, nodeCg, mc.limit, strconv.FormatInt(used+128<<20, 10))
	t.Logf("neighbours hold %d MiB; node limit %d MiB", used>>20, (used+128<<20)>>20)

	hog := n.create(t, api.CreateSandboxRequest{MemoryBytes: 1 << 30})
	r, err := n.cl.Exec(ctx, hog, api.ExecRequest{Cmd: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"}, TimeoutMs: 60_000})
	if err != nil {
		t.Fatalf("the OOM-killed exec is not answered as the task's result: %v", err)
	}
	if !r.OOMKilled || r.ExitCode == 0 {
		t.Errorf("hog past the node's memory: %+v, want oom_killed", r)
	}
	if p, err := os.ReadFile("/proc/" + strconv.Itoa(n.cmd.Process.Pid) + "/cgroup"); err != nil || !strings.Contains(string(p), filepath.Base(serverCg)) {
		t.Errorf("the server is not in its memory cgroup (%v): %s", err, p)
	}
	for _, id := range neighbours {
		r := n.sh(t, id, "kill -USR1 $(cat /tmp/holder.pid) && sleep 1 && cat /tmp/sum2")
		if r.ExitCode != 0 || r.Stdout != sums[id] {
			t.Errorf("neighbour %s after the OOM: %+v (its memory: %q before)", id, r, sums[id])
		}
	}
	if r := n.sh(t, hog, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("the OOM-killed sandbox after the kill: %+v", r)
	}
	if _, err := n.cl.Info(ctx); err != nil {
		t.Errorf("server after the OOM: %v", err)
	}
	extra := n.create(t, api.CreateSandboxRequest{})
	if r := n.sh(t, extra, "echo created"); r.Stdout != "created\n" {
		t.Errorf("a new sandbox after the OOM: %+v", r)
	}
	n.deleteAllParallel(t, ctx)
	n.stop(true)
	requireBaseline(t, n.dataDir, 0, base)
}
