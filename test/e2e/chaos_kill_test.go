package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestChaosKillDuringBurst kills the server with SIGKILL while a burst of 500
// creates (each with its own request ID) is in flight, restarts it on the same
// data dir and lets every client retry its own create until it is answered.
// Every failure a client saw is a retryable infrastructure error; afterwards
// every request ID names exactly one sandbox, the one its client was given
// (before or after the restart), nothing else exists, and once everything is
// deleted the node owns nothing on the host.
func TestChaosKillDuringBurst(t *testing.T) {
	const total, killAfter, workers = 500, 150, 32
	n, base := startChaosNode(t, "")
	t0 := time.Now()
	cl := client.New("http://"+n.addr, n.token, client.WithRetry(0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var created atomic.Int64
	killed := make(chan struct{})
	restarted := make(chan struct{})
	var mu sync.Mutex
	got := map[string]string{} // request ID → sandbox ID the client was given
	var seenErrors []string
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				rid := fmt.Sprintf("chaos-kill-%d", i)
				for attempt := 0; ; attempt++ {
					sb, err := cl.Create(ctx, api.CreateSandboxRequest{RequestID: rid})
					if err == nil {
						mu.Lock()
						if prev, ok := got[rid]; ok && prev != sb.ID {
							t.Errorf("request %s answered with %s and then %s", rid, prev, sb.ID)
						}
						got[rid] = sb.ID
						mu.Unlock()
						created.Add(1)
						break
					}
					ae, ok := api.AsError(err)
					if !ok || !ae.Retryable || !ae.Infrastructure {
						t.Errorf("create %s: %v: not a retryable infrastructure error", rid, err)
						return
					}
					mu.Lock()
					seenErrors = append(seenErrors, string(ae.Code))
					mu.Unlock()
					if ctx.Err() != nil || attempt > 600 {
						t.Errorf("create %s never succeeded: %v", rid, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	go func() { // the chaos: kill -9 once killAfter creates succeeded, then restart
		for created.Load() < killAfter && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		n.stop(false)
		close(killed)
		time.Sleep(500 * time.Millisecond) // clients see the node gone
		n.start()
		close(restarted)
	}()
	wg.Wait()
	<-restarted
	select {
	case <-killed:
	default:
		t.Fatal("the server was never killed")
	}
	t.Logf("%d creates answered in %v; %d retryable errors on the way (%v...)", len(got), time.Since(t0).Round(time.Millisecond), len(seenErrors), head(seenErrors))
	if len(seenErrors) == 0 {
		t.Error("no client saw the kill: it came after the burst")
	}

	sbs, err := n.cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byReq := map[string][]string{}
	for _, s := range sbs {
		byReq[s.RequestID] = append(byReq[s.RequestID], s.ID)
	}
	if len(sbs) != total {
		t.Errorf("%d sandboxes listed after the restart, want %d (one per request)", len(sbs), total)
	}
	for rid, id := range got {
		if ids := byReq[rid]; len(ids) != 1 || ids[0] != id {
			t.Errorf("request %s: client has %s, node lists %v", rid, id, ids)
		}
	}
	// Some of them, created before and after the kill, still work.
	for i := 0; i < total; i += 50 {
		id := got[fmt.Sprintf("chaos-kill-%d", i)]
		if r, err := n.cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Errorf("exec in %s after the restart: %+v %v", id, r, err)
		}
	}
	// The baseline check sees sandboxes: every one has its cgroups and init.
	if mid := ownedState(t, n.dataDir, n.cmd.Process.Pid); len(mid.Cgroups) < total || len(mid.Procs) < total {
		t.Errorf("with %d sandboxes running the host shows only %s", total, mid)
	}
	t1 := time.Now()
	n.deleteAllParallel(t, ctx)
	t.Logf("deleted %d in %v", len(sbs), time.Since(t1).Round(time.Millisecond))
	n.stop(true)
	requireBaseline(t, n.dataDir, 0, base)
}
