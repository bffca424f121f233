package cluster

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two candidates: one leads at a time; when the leader's process dies (its
// etcd connection goes away without resigning) the other takes over within
// the TTL.
func TestRunElectedTakeover(t *testing.T) {
	cli := testEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leading atomic.Int32 // candidates leading now
	var mu sync.Mutex
	led := map[string]int{} // rounds each candidate led
	var overlap atomic.Bool // two led at once
	lead := func(id string) func(context.Context) {
		return func(ctx context.Context) {
			if leading.Add(1) > 1 {
				overlap.Store(true)
			}
			defer leading.Add(-1)
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					mu.Lock()
					led[id]++
					mu.Unlock()
				}
			}
		}
	}
	rounds := func(id string) int { mu.Lock(); defer mu.Unlock(); return led[id] }
	// Candidate a has its own client: closing it is a process dying.
	acli, err := Connect(ctx, ClientConfig{Endpoints: strings.Join(cli.Endpoints(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	actx, astop := context.WithCancel(ctx)
	defer astop()
	const ttl = 2 * time.Second
	adone := make(chan struct{})
	go func() {
		defer close(adone)
		RunElected(actx, ElectionConfig{Client: acli, Prefix: "/el/", Task: "rec", ID: "a", TTL: ttl, Logger: quiet()}, lead("a"))
	}()
	eventually(t, 5*time.Second, "a leads", func() error {
		if rounds("a") == 0 {
			return errString("not yet")
		}
		return nil
	})
	bdone := make(chan struct{})
	go func() {
		defer close(bdone)
		RunElected(ctx, ElectionConfig{Client: cli, Prefix: "/el/", Task: "rec", ID: "b", TTL: ttl, Logger: quiet()}, lead("b"))
	}()
	time.Sleep(500 * time.Millisecond) // time passes for b to (wrongly) lead: nothing to wait for
	if n := rounds("b"); n != 0 {
		t.Fatalf("b led %d rounds while a leads", n)
	}
	if id, ok, err := Leader(ctx, cli, "/el/", "rec"); err != nil || !ok || id != "a" {
		t.Fatalf("leader %q %v %v, want a", id, ok, err)
	}
	// a dies: its connection closes, nothing is resigned or revoked.
	killed := time.Now()
	_ = acli.Close()
	took := eventually(t, 4*ttl, "b takes over", func() error {
		if rounds("b") == 0 {
			return errString("not yet")
		}
		return nil
	})
	t.Logf("b took over %v after a died (TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
	_ = took
	if id, _, _ := Leader(ctx, cli, "/el/", "rec"); id != "b" {
		t.Errorf("leader %q after the takeover, want b", id)
	}
	if overlap.Load() {
		t.Error("two candidates led at once")
	}
	astop()
	<-adone
	// b stopping resigns: no leader is left behind.
	cancel()
	<-bdone
	if id, ok, _ := Leader(context.Background(), cli, "/el/", "rec"); ok {
		t.Errorf("leader %q after both stopped", id)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
