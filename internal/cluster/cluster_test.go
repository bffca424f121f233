package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// One etcd for every case (starting one costs about a second).
func TestWithEtcd(t *testing.T) {
	cli := testEtcd(t)
	sec := mustSecret(t, "the-cluster-secret-0123")
	other := mustSecret(t, "another-secret-987654321")

	t.Run("registry: ready, lost after the TTL, back, drained", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, err := NewWatcher(ctx, WatcherConfig{Client: cli, Prefix: "/t1/", Secret: sec, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		if err := Register(actx, RegisterConfig{Client: cli, Prefix: "/t1/", Secret: sec, TTL: 2 * time.Second,
			ReportInterval: 200 * time.Millisecond, Report: record("a"), Logger: quiet()}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "ready", want(w, "a", "ready"))
		stop() // revokes the lease: lost at once
		eventually(t, 2*time.Second, "lost after a clean stop", want(w, "a", "lost"))

		// A node that stops renewing without revoking (kill -9) is lost within the TTL.
		g, _ := cli.Grant(ctx, 2)
		r := &registrar{cfg: RegisterConfig{Client: cli, Secret: sec}, k: newKeys("/t1/")}
		rec, _ := record("b")(ctx)
		if err := r.put(ctx, g.ID, rec, true); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "b ready", want(w, "b", "ready"))
		took := eventually(t, 5*time.Second, "b lost", want(w, "b", "lost"))
		if took > 3500*time.Millisecond {
			t.Errorf("lost after %s with a 2 s TTL", took)
		}
		// Back: a new registration makes it ready again.
		bctx, bstop := context.WithCancel(ctx)
		defer bstop()
		if err := Register(bctx, RegisterConfig{Client: cli, Prefix: "/t1/", Secret: sec, TTL: 2 * time.Second, Report: record("b"), Logger: quiet()}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "b back", want(w, "b", "ready"))

		adm := Admin{Client: cli, Prefix: "/t1/"}
		if err := adm.SetDrain(ctx, "b", true); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "b draining", want(w, "b", "draining"))
		snap, _ := w.Snapshot(ctx)
		if len(snap) != 2 || snap[1].Name != "b" || snap[1].State != "draining" || snap[0].State != "lost" {
			t.Errorf("snapshot %+v", snap)
		}
		if err := adm.SetDrain(ctx, "b", false); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "b undrained", want(w, "b", "ready"))
		if err := adm.SetDrain(ctx, "zz", true); !errdefs.Is(err, api.CodeNotFound) {
			t.Errorf("drain of an unknown node: %v", err)
		}
		if err := adm.Forget(ctx, "b"); !errdefs.Is(err, api.CodeConflict) {
			t.Errorf("forget of a live node: %v", err)
		}
		if err := adm.Forget(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "a forgotten", want(w, "a", "unknown"))
		if err := adm.Forget(ctx, "a"); !errdefs.Is(err, api.CodeNotFound) {
			t.Errorf("forget of an unknown node: %v", err)
		}
		if st := state(w, "b"); st != "ready" {
			t.Errorf("b is %s after the refused forget", st)
		}
	})

	t.Run("a removed node's request claims go, others stay", func(t *testing.T) {
		ctx := context.Background()
		reqs := NewRequests(cli, "/t1c/")
		for i := range 1500 { // more than one page of the scan
			node := "gone"
			if i%3 == 0 {
				node = "kept"
			}
			if _, err := reqs.Claim(ctx, fmt.Sprintf("r%d", i), node); err != nil {
				t.Fatal(err)
			}
		}
		n, err := Admin{Client: cli, Prefix: "/t1c/"}.ForgetClaims(ctx, "gone")
		if err != nil || n != 1000 {
			t.Fatalf("ForgetClaims: %d, %v; want 1000", n, err)
		}
		for i := range 1500 {
			h, ok, err := reqs.Lookup(ctx, fmt.Sprintf("r%d", i))
			if err != nil || ok != (i%3 == 0) || (ok && h != "kept") {
				t.Fatalf("claim r%d after ForgetClaims: %q %v %v", i, h, ok, err)
			}
		}
	})

	t.Run("records signed with another secret are ignored", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, err := NewWatcher(ctx, WatcherConfig{Client: cli, Prefix: "/t2/", Secret: sec, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := Register(ctx, RegisterConfig{Client: cli, Prefix: "/t2/", Secret: other, Report: record("evil"), Logger: quiet()}); err != nil {
			t.Fatal(err)
		}
		if err := Register(ctx, RegisterConfig{Client: cli, Prefix: "/t2/", Secret: sec, Report: record("good"), Logger: quiet()}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "good ready", want(w, "good", "ready"))
		if st := state(w, "evil"); st != "unknown" {
			t.Fatalf("a node signed with another secret is %s", st)
		}
		if u := w.Untrusted(); len(u) != 2 || !strings.Contains(u["/t2/n/live/evil"], "does not verify") {
			t.Errorf("untrusted = %v", u)
		}
		// A record copied under another node's name does not verify either.
		resp, _ := cli.Get(ctx, "/t2/n/known/good")
		_, _ = cli.Put(ctx, "/t2/n/known/copy", string(resp.Kvs[0].Value))
		eventually(t, 2*time.Second, "the copy seen and refused", func() error {
			if why := w.Untrusted()["/t2/n/known/copy"]; !strings.Contains(why, `names node "good"`) {
				return fmt.Errorf("untrusted = %v", w.Untrusted())
			}
			return nil
		})
		if st := state(w, "copy"); st != "unknown" {
			t.Fatalf("a record renamed to another node is %s", st)
		}
	})

	t.Run("CheckSecret", func(t *testing.T) {
		ctx := context.Background()
		if err := CheckSecret(ctx, cli, "/t3/", sec); err != nil {
			t.Fatal(err)
		}
		if err := CheckSecret(ctx, cli, "/t3/", sec); err != nil {
			t.Fatal(err)
		}
		if err := CheckSecret(ctx, cli, "/t3/", other); err != ErrWrongSecret {
			t.Fatalf("another secret: %v", err)
		}
	})

	t.Run("CheckFormat", func(t *testing.T) {
		ctx := context.Background()
		for range 2 { // the first stores it, a later one compares
			if err := CheckFormat(ctx, cli, "/t3f/"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cli.Put(ctx, "/t3f/format", "9"); err != nil {
			t.Fatal(err)
		}
		if err := CheckFormat(ctx, cli, "/t3f/"); !errors.Is(err, datafmt.ErrNewer) {
			t.Fatalf("a cluster of a later dsec: %v", err)
		}
		if r, err := cli.Get(ctx, "/t3f/format"); err != nil || string(r.Kvs[0].Value) != "9" {
			t.Errorf("the refused format was rewritten: %v", err)
		}
	})

	t.Run("tokens: the first API server creates one, every one accepts it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d1, d2 := t.TempDir(), t.TempDir()
		t1, err := OpenTokens(ctx, cli, "/t4/", filepath.Join(d1, "token"), "api1", quiet())
		if err != nil {
			t.Fatal(err)
		}
		t2, err := OpenTokens(ctx, cli, "/t4/", filepath.Join(d2, "token"), "api2", quiet())
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(d1, "token"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(d2, "token")); !os.IsNotExist(err) {
			t.Errorf("the second API server wrote a token file: %v", err)
		}
		tok := strings.TrimSpace(string(b))
		if !t1.Match(tok) || !t2.Match(tok) || t1.Match("") || t2.Match(tok+"x") {
			t.Fatal("token matching is wrong")
		}
		if err := t1.Add(ctx, "a-second-token-for-ci", "test"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "added token seen", func() error {
			if !t2.Match("a-second-token-for-ci") {
				return errdefs.NotFound("not yet")
			}
			return nil
		})
		if resp, _ := cli.Get(ctx, "/t4/", clientv3WithPrefix()); strings.Contains(resp.Kvs[0].String()+resp.Kvs[len(resp.Kvs)-1].String(), tok) {
			t.Error("a token is stored in clear")
		}
	})

	t.Run("request claims", func(t *testing.T) {
		ctx := context.Background()
		r := NewRequests(cli, "/t5/")
		if h, err := r.Claim(ctx, "rid", "n1"); err != nil || h != "n1" {
			t.Fatalf("claim: %q %v", h, err)
		}
		if h, _ := r.Claim(ctx, "rid", "n2"); h != "n1" {
			t.Fatalf("second claim went to %q", h)
		}
		if h, _ := r.Move(ctx, "rid", "n1", "n3"); h != "n3" {
			t.Fatalf("move: %q", h)
		}
		if h, _ := r.Move(ctx, "rid", "n1", "n2"); h != "n3" {
			t.Fatalf("stale move: %q", h)
		}
		r.Drop(ctx, "rid", "n1") // not the holder: kept
		if h, _ := r.Claim(ctx, "rid", "n2"); h != "n3" {
			t.Fatalf("after a stale drop: %q", h)
		}
		r.Drop(ctx, "rid", "n3")
		if h, _ := r.Claim(ctx, "rid", "n2"); h != "n2" {
			t.Fatalf("after drop: %q", h)
		}
	})

	// Concurrent claims go to etcd in shared transactions: every request ID
	// still has exactly one holder, which every caller of it is told, also
	// when another API server (a second Requests) claimed some IDs first and
	// when one batch holds the same ID twice.
	t.Run("batched claims", func(t *testing.T) {
		ctx := context.Background()
		a, b := NewRequests(cli, "/t6/"), NewRequests(cli, "/t6/")
		const ids = 150
		for i := 0; i < ids; i += 3 {
			if h, err := b.Claim(ctx, fmt.Sprintf("r%d", i), "other"); err != nil || h != "other" {
				t.Fatalf("pre-claim: %q %v", h, err)
			}
		}
		holders := make([][3]string, ids)
		var wg sync.WaitGroup
		for i := 0; i < ids; i++ {
			for k := 0; k < 3; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := a.Claim(ctx, fmt.Sprintf("r%d", i), fmt.Sprintf("n%d", k))
					if err != nil {
						t.Errorf("claim r%d: %v", i, err)
					}
					holders[i][k] = h
				}()
			}
		}
		wg.Wait()
		for i, hs := range holders {
			stored, ok, err := a.Lookup(ctx, fmt.Sprintf("r%d", i))
			if err != nil || !ok {
				t.Fatalf("r%d: no claim stored (%v)", i, err)
			}
			if i%3 == 0 && stored != "other" {
				t.Errorf("r%d: claimed first elsewhere, now held by %q", i, stored)
			}
			for k, h := range hs {
				if h != stored {
					t.Errorf("r%d: caller %d told %q, etcd holds %q", i, k, h, stored)
				}
			}
		}
	})
}
