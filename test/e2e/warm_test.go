package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// startedSandboxes lists the sandboxes n has started on the host, recorded or
// waiting in its warm pool: the distinct names of its sandbox cgroups.
func (n *node) startedSandboxes(t *testing.T) []string {
	t.Helper()
	pid := 0
	if n.cmd != nil {
		pid = n.cmd.Process.Pid
	}
	var ids []string
	for _, cg := range ownedState(t, n.dataDir, pid).Cgroups {
		if id := filepath.Base(cg); strings.HasPrefix(id, "sb-") && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestWarmPool: `dsec server --warm-pool 2` starts two sandboxes before any
// create and lists neither. A default create (labels are the request's own)
// is answered with one of them: its hostname is its ID, it runs commands, and
// the create is counted in the "warm" phase. The pool fills again. An egress
// create takes a waiting sandbox too, and its allowed connection works. A node
// killed with a pool releases the waiting sandboxes at its next start (they
// have no record) and keeps the created one. A node stopped as `dsec server
// --cleanup` stops leaves nothing on the host.
func TestWarmPool(t *testing.T) {
	n, base := startChaosNode(t, "", "--warm-pool", "2")
	testwait.For(t, 30*time.Second, "two waiting sandboxes", func() bool { return len(n.startedSandboxes(t)) == 2 })
	pool := n.startedSandboxes(t)
	ctx := context.Background()
	if l, err := n.cl.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("list with only the pool: %+v, %v", l, err)
	}

	id := n.create(t, api.CreateSandboxRequest{Labels: map[string]string{"task": "warm"}})
	if !slices.Contains(pool, id) {
		t.Errorf("default create made %s, not one of the waiting %v", id, pool)
	}
	if r := n.sh(t, id, "hostname; echo ok > /tmp/f && cat /tmp/f"); r.ExitCode != 0 || r.Stdout != id+"\nok\n" {
		t.Errorf("exec in the taken sandbox: %+v", r)
	}
	sb, err := n.cl.Get(ctx, id)
	if err != nil || sb.Labels["task"] != "warm" {
		t.Errorf("the taken sandbox: %+v, %v", sb, err)
	}
	m, err := metricstest.Scrape("http://"+n.addr+"/metrics", n.token)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Value("dsec_sandbox_create_phase_duration_seconds_count", "backend=container", "phase=warm"); got != 1 {
		t.Errorf("creates counted in the warm phase: %v, want 1", got)
	}
	if got := m.Value("dsec_warm_pool_size"); got != 2 {
		t.Errorf("dsec_warm_pool_size %v, want 2", got)
	}
	testwait.For(t, 30*time.Second, "the pool fills again", func() bool { return len(n.startedSandboxes(t)) == 3 })
	// The gauge counts the waiting sandboxes once they are in the pool
	// (started and handed over), not the one taken.
	testwait.For(t, 30*time.Second, "dsec_warm_pool_sandboxes 2", func() bool {
		m, err := metricstest.Scrape("http://"+n.addr+"/metrics", n.token)
		return err == nil && m.Value("dsec_warm_pool_sandboxes") == 2
	})
	var waiting []string
	for _, s := range n.startedSandboxes(t) {
		if s != id {
			waiting = append(waiting, s)
		}
	}

	// A network policy is applied to the waiting sandbox the create takes.
	h := netpolicytest.NewHost(t, "dstw", 86)
	addr := h.Listen(t, 8080)
	waitingNow := waiting
	egress := n.create(t, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{h.Addr.String() + "/32:8080"}}})
	if !slices.Contains(waitingNow, egress) {
		t.Errorf("egress create made %s, not one of the waiting %v", egress, waitingNow)
	}
	if out, ok := n.connect(t, egress, addr); !ok || !strings.HasPrefix(out, "hello from") {
		t.Errorf("allowed connection from the taken sandbox failed: %q (network %+v)", out, n.network(t, egress))
	}
	if err := n.cl.Delete(ctx, egress); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the egress sandbox gone, the pool full again", func() bool {
		now := n.startedSandboxes(t)
		return len(now) == 3 && !slices.Contains(now, egress)
	})
	waiting = nil
	for _, s := range n.startedSandboxes(t) {
		if s != id {
			waiting = append(waiting, s)
		}
	}

	n.stop(false) // kill -9
	n.start()
	testwait.For(t, 30*time.Second, "the killed node's waiting sandboxes released, two new ones", func() bool {
		now := n.startedSandboxes(t)
		for _, w := range waiting {
			if slices.Contains(now, w) {
				return false
			}
		}
		return len(now) == 3 && slices.Contains(now, id)
	})
	if l, err := n.cl.List(ctx); err != nil || len(l) != 1 || l[0].ID != id {
		t.Errorf("list after the restart: %+v, %v; want only %s", l, err, id)
	}
	if r := n.sh(t, id, "cat /tmp/f"); r.Stdout != "ok\n" {
		t.Errorf("the created sandbox after the restart: %+v", r)
	}

	n.stop(true)
	requireBaseline(t, n.dataDir, 0, base)
}

// TestBenchCycleWarm runs `dsec bench cycle --warm-pool 1` at a tiny size:
// the CLI cycles against the pooled server run beside the plain ones, without
// failures, and are compared with them.
func TestBenchCycleWarm(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	out, err := exec.Command(binPath, "bench", "cycle", "--n", "2", "--peers", "", "--warm-pool", "1", "--json").Output()
	if err != nil {
		t.Fatalf("bench cycle --warm-pool: %v: %s", err, out)
	}
	var r bench.CycleResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("not one JSON object: %v: %s", err, out)
	}
	if r.WarmPool != 1 {
		t.Errorf("warm_pool %d, want 1", r.WarmPool)
	}
	for _, name := range []string{"dsec-cli", "dsec-run", "dsec-cli-warm", "dsec-run-warm"} {
		if s := r.Sides[name]; s == nil || s.N != 2 || s.Failures != 0 {
			t.Errorf("side %s: %+v", name, s)
		}
	}
	if r.RatiosP50["dsec-run-warm/dsec-run"] <= 0 {
		t.Errorf("no dsec-run-warm/dsec-run ratio: %v", r.RatiosP50)
	}
}
