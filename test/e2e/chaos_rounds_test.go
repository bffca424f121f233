package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// envInt is the integer in the environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestChaosKillRounds: round after round, a burst of creates (every fourth
// with egress, so with a link, addresses and nftables rules) is cut by a
// SIGKILL of the server at a random point; the server restarts on the same
// data dir, everything it lists is deleted and it stops. After every round the
// node owns nothing on the host: no process, cgroup, mount, network
// namespace, link or nftables table, whatever the kill interrupted (a create
// before or after its record, a link half made). DSEC_CHAOS_ROUNDS (default
// 20) and DSEC_CHAOS_BURST (default 200) size it.
func TestChaosKillRounds(t *testing.T) {
	rounds, burst := envInt(t, "DSEC_CHAOS_ROUNDS", 20), envInt(t, "DSEC_CHAOS_BURST", 200)
	const workers = 16
	n, base := startChaosNode(t, "")
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for round := range rounds {
		if n.cmd == nil {
			n.start()
		}
		killAt := int64(rng.IntN(burst))
		cl := client.New("http://"+n.addr, n.token, client.WithRetry(0))
		var created, next atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(burst) {
						return
					}
					select {
					case <-stop:
						return
					default:
					}
					req := api.CreateSandboxRequest{RequestID: fmt.Sprintf("round-%d-%d", round, i)}
					if i%4 == 0 {
						req.Network = &api.NetworkPolicy{Allow: []string{"192.0.2.1/32"}}
					}
					if _, err := cl.Create(ctx, req); err == nil {
						created.Add(1)
					}
				}
			}()
		}
		for created.Load() < killAt && next.Load() < int64(burst) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		n.stop(false) // SIGKILL mid-burst
		close(stop)
		wg.Wait()
		n.start()
		n.deleteAllParallel(t, ctx)
		n.stop(true)
		if !requireBaseline(t, n.dataDir, 0, base) {
			t.Fatalf("round %d of %d (SIGKILL after %d creates) left the host state above", round+1, rounds, killAt)
		}
	}
}
