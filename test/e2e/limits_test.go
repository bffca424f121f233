package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// neighbourOK runs a short command in another sandbox while a limit test runs.
func neighbourOK(t *testing.T, n *node, id string) {
	t.Helper()
	r, err := n.cl.Exec(context.Background(), id, api.ExecRequest{Shell: "echo alive", TimeoutMs: 30_000})
	if err != nil || strings.TrimSpace(r.Stdout) != "alive" {
		t.Errorf("neighbour disturbed: %+v %v", r, err)
	}
}

func TestLimits(t *testing.T) {
	n := startNode(t)
	neighbour := n.create(t, api.CreateSandboxRequest{})

	t.Run("memory hog is OOM-killed and reported", func(t *testing.T) {
		id := n.create(t, api.CreateSandboxRequest{MemoryBytes: 64 << 20})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); neighbourOK(t, n, neighbour) }()
		r, err := n.cl.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"python3", "-c", "x = bytearray(512<<20); print(len(x))"}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OOMKilled || r.Signal != "SIGKILL" || r.ExitCode != -1 || r.Stdout != "" {
			t.Fatalf("want OOM kill, got %+v", r)
		}
		// Through a shell, the shell survives and reports 137; still an OOM.
		r = n.sh(t, id, `python3 -c 'x = bytearray(512<<20)'`)
		wg.Wait()
		if !r.OOMKilled || r.ExitCode != 137 {
			t.Fatalf("want OOM kill through the shell, got %+v", r)
		}
		if r := n.sh(t, id, "echo still-usable"); strings.TrimSpace(r.Stdout) != "still-usable" {
			t.Fatalf("sandbox unusable after OOM: %+v", r)
		}
	})
	t.Run("fork bomb is contained by pids limit", func(t *testing.T) {
		id := n.create(t, api.CreateSandboxRequest{PidsMax: 64})
		if _, err := n.cl.StartProcess(context.Background(), id, api.ExecRequest{Shell: `bomb() { bomb | bomb & }; bomb`}); err != nil {
			t.Fatal(err)
		}
		// The bomb hits the limit (pids.events counts refused forks), then the
		// neighbour still answers while it runs.
		var ev string
		hit := testwait.Until(30*time.Second, func() bool {
			ev = n.cgroupText(t, id, "pids", "pids.events")
			return strings.Contains(ev, "max ") && !strings.Contains(ev, "max 0")
		})
		if !hit {
			t.Fatalf("the bomb never hit the limit within 30 s: %q", ev)
		}
		neighbourOK(t, n, neighbour)
		cur, max := n.cgroupInt(t, id, "pids", "pids.current"), n.cgroupInt(t, id, "pids", "pids.max")
		if max != 64 || cur > 64 {
			t.Fatalf("pids.current %d, pids.max %d", cur, max)
		}
		if _, err := n.cl.Reset(context.Background(), id); err != nil {
			t.Fatalf("reset after fork bomb: %v", err)
		}
		if r := n.sh(t, id, "echo fresh"); strings.TrimSpace(r.Stdout) != "fresh" {
			t.Fatalf("after reset: %+v", r)
		}
	})
	t.Run("disk writes stop at the writable layer limit", func(t *testing.T) {
		id := n.create(t, api.CreateSandboxRequest{DiskBytes: 32 << 20})
		r := n.sh(t, id, "dd if=/dev/zero of=/root/big bs=1M count=100 2>&1; echo rc=$?; du -m /root/big | cut -f1")
		if !strings.Contains(r.Stdout, "No space left on device") || strings.Contains(r.Stdout, "rc=0") {
			t.Fatalf("write beyond the limit succeeded: %q", r.Stdout)
		}
		neighbourOK(t, n, neighbour)
		if r := n.sh(t, neighbour, "dd if=/dev/zero of=/root/f bs=1M count=40 2>&1; echo rc=$?"); !strings.Contains(r.Stdout, "rc=0") {
			t.Fatalf("neighbour cannot write 40 MB: %q", r.Stdout)
		}
	})
	t.Run("cpu limit is enforced", func(t *testing.T) {
		id := n.create(t, api.CreateSandboxRequest{CPU: 0.25})
		r := n.sh(t, id, `python3 -c '
import time,os
t=time.time(); c=time.process_time()
while time.time()-t<2: pass
print(round((time.process_time()-c)/(time.time()-t),2))'`)
		var share float64
		if _, err := fmtSscan(strings.TrimSpace(r.Stdout), &share); err != nil || share > 0.4 {
			t.Fatalf("cpu share %q, want about 0.25", r.Stdout)
		}
	})
	t.Run("timeout kills the command", func(t *testing.T) {
		r, err := n.cl.Exec(context.Background(), neighbour, api.ExecRequest{Shell: "sleep 30", TimeoutMs: 300})
		if err != nil {
			t.Fatal(err)
		}
		if !r.TimedOut || r.DurationMs > 5000 {
			t.Fatalf("want timeout, got %+v", r)
		}
	})
}
