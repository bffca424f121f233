package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestRestartReadopts kills the server with SIGKILL and checks that a new server
// process re-adopts the sandbox with its files and its running processes.
func TestRestartReadopts(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{})
	n.sh(t, id, "echo persisted > /root/state.txt")
	p, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Shell: "echo started; sleep 3; echo finished; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	long, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Shell: "exec sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}

	n.stop(false) // kill -9
	n.start()

	sbs, err := n.cl.List(ctx)
	if err != nil || len(sbs) != 1 || sbs[0].ID != id || sbs[0].State != api.StateRunning {
		t.Fatalf("after restart: %+v %v", sbs, err)
	}
	if r := n.sh(t, id, "cat /root/state.txt"); strings.TrimSpace(r.Stdout) != "persisted" {
		t.Fatalf("file lost: %+v", r)
	}
	if r := n.sh(t, id, "cat /proc/[0-9]*/comm | grep -cx sleep"); strings.TrimSpace(r.Stdout) != "2" {
		t.Fatalf("processes lost: %q %q", r.Stdout, r.Stderr)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := n.cl.WaitProcess(wctx, id, p.ID, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.Running || got.Result == nil || got.Result.ExitCode != 7 {
		t.Fatalf("re-attached process: %+v", got)
	}
	rc, err := n.cl.ProcessLogs(ctx, id, p.ID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 1024)
	for {
		k, err := rc.Read(buf)
		sb.Write(buf[:k])
		if err != nil {
			break
		}
	}
	rc.Close()
	if sb.String() != "started\nfinished\n" {
		t.Fatalf("logs %q", sb.String())
	}
	if err := n.cl.KillProcess(ctx, id, long.ID, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	got, err = n.cl.WaitProcess(wctx, id, long.ID, 10*time.Second)
	if err != nil || got.Running || got.Result.Signal != "SIGTERM" {
		t.Fatalf("kill after restart: %+v %v", got, err)
	}
}
