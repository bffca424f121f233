package clustere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestProjects: projects and quotas across two API servers on one etcd, and
// the same rules on a one-machine `dsec server`.
func TestProjects(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	as := func(i int, tok string) *client.Client {
		return client.New("http://"+e.apiAddr[i], tok, client.WithRetry(0))
	}
	adm := e.client(0)
	qa, err := adm.CreateProject(ctx, "qa", api.Quota{MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := adm.CreateProject(ctx, "qb", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	// Tokens reach the other API server by etcd's watch.
	e.waitFor("API server 1 accepts the new tokens", 10*time.Second, func() error {
		if _, err := as(1, qa.Token).List(ctx); err != nil {
			return err
		}
		_, err := as(1, qb.Token).List(ctx)
		return err
	})
	a0, a1, b1 := as(0, qa.Token), as(1, qa.Token), as(1, qb.Token)
	var mine []string
	t.Run("max 3 sandboxes through both API servers; the 4th is refused", func(t *testing.T) {
		for _, c := range []*client.Client{a0, a1, a0} {
			sb, err := c.Create(ctx, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			mine = append(mine, sb.ID)
		}
		_, err := a1.Create(ctx, api.CreateSandboxRequest{})
		ae, _ := api.AsError(err)
		if ae == nil || ae.Code != api.CodeQuotaExceeded || ae.Status != 429 || !strings.Contains(ae.Message, "max_sandboxes") {
			t.Fatalf("4th create: %v", err)
		}
		if l, _ := a0.List(ctx); len(l) != 3 {
			t.Fatalf("qa lists %d sandboxes after the refusal, want 3", len(l))
		}
	})
	t.Run("another project sees and touches nothing of it", func(t *testing.T) {
		if _, err := b1.Get(ctx, mine[0]); errCode(err) != api.CodeNotFound {
			t.Fatalf("qb gets qa's sandbox: %v", err)
		}
		if _, err := b1.Exec(ctx, mine[0], api.ExecRequest{Cmd: []string{"true"}}); errCode(err) != api.CodeNotFound {
			t.Fatalf("qb execs in qa's sandbox: %v", err)
		}
		if err := b1.Delete(ctx, mine[0]); errCode(err) != api.CodeNotFound {
			t.Fatalf("qb deletes qa's sandbox: %v", err)
		}
		if l, err := b1.List(ctx); err != nil || len(l) != 0 {
			t.Fatalf("qb lists %d sandboxes (%v)", len(l), err)
		}
		if _, err := b1.Projects(ctx); errCode(err) != api.CodePermissionDenied {
			t.Fatalf("qb administers projects: %v", err)
		}
		if r, err := a1.Exec(ctx, mine[0], api.ExecRequest{Cmd: []string{"echo", "ok"}}); err != nil || r.Stdout != "ok\n" {
			t.Fatalf("qa's own exec: %+v %v", r, err)
		}
	})
	t.Run("a delete frees one slot: two API servers race for it, one wins", func(t *testing.T) {
		if err := a1.Delete(ctx, mine[0]); err != nil {
			t.Fatal(err)
		}
		mine = mine[1:]
		var wg sync.WaitGroup
		res := make([]error, 2)
		ids := make([]string, 2)
		for i, c := range []*client.Client{a0, a1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := c.Create(ctx, api.CreateSandboxRequest{})
				res[i], ids[i] = err, sb.ID
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range res {
			switch {
			case err == nil:
				won++
				mine = append(mine, ids[i])
			case errCode(err) != api.CodeQuotaExceeded:
				t.Errorf("API server %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d creates won the last slot: %v", won, res)
		}
	})
	t.Run("a batch counts whole: all or nothing", func(t *testing.T) {
		for _, id := range mine[:2] {
			if err := a0.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		mine = mine[2:]
		_, err := a1.CreateBatch(ctx, make([]api.CreateSandboxRequest, 3))
		if errCode(err) != api.CodeQuotaExceeded {
			t.Fatalf("a batch of 3 with 1 live: %v", err)
		}
		if l, _ := a0.List(ctx); len(l) != 1 {
			t.Fatalf("after the refused batch qa has %d sandboxes", len(l))
		}
		sbs, err := a1.CreateBatch(ctx, make([]api.CreateSandboxRequest, 2))
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs {
			mine = append(mine, sb.ID)
		}
		out := cli(t, e.bin, e.apiAddr[1], e.token, "project", "ls", "--json")
		var ps []api.Project
		if err := json.Unmarshal([]byte(out), &ps); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, p := range ps {
			if p.Name == "qa" && (p.Usage.Sandboxes != 3 || p.Usage.CPU != 3 || p.Quota.MaxSandboxes != 3) {
				t.Errorf("dsec project ls: %+v", p)
			}
		}
	})
	t.Run("quota cost: create p50 with and without a quota, interleaved, one API server", func(t *testing.T) {
		lim, err := adm.CreateProject(ctx, "qlim", api.Quota{MaxSandboxes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		unl, err := adm.CreateProject(ctx, "qunl", api.Quota{})
		if err != nil {
			t.Fatal(err)
		}
		cs := map[string]*client.Client{"quota": as(0, lim.Token), "none": as(0, unl.Token)}
		e.waitFor("API server 0 knows both projects' tokens", 10*time.Second, func() error {
			for _, c := range cs {
				if _, err := c.List(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		took := map[string][]time.Duration{}
		// Rounds of 8 of each kind, interleaved (the order swaps every round).
		// The sandboxes of a round stay until its end and the round then waits
		// for the nodes' load reports (every 2 s) and a placement snapshot:
		// quickly deleted ones still count in placement until then, and the
		// cluster has 36 slots.
		const rounds, n = 3, 8
		for r := range rounds {
			made := map[string][]string{}
			for i := range 2 * n {
				kind := []string{"quota", "none"}[(i+r)%2]
				t0 := time.Now()
				sb, err := cs[kind].Create(ctx, api.CreateSandboxRequest{})
				took[kind] = append(took[kind], time.Since(t0))
				if err != nil {
					t.Fatal(err)
				}
				made[kind] = append(made[kind], sb.ID)
			}
			for kind, ids := range made {
				for _, id := range ids {
					if err := cs[kind].Delete(ctx, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			e.waitFor("the nodes' load reports count no deleted sandbox", 20*time.Second, func() error {
				return reportsCaughtUp(ctx, adm, adm, a0, b1, cs["quota"], cs["none"])
			})
			e.placementCaughtUp()
		}
		t.Logf("create through one API server, %d each, interleaved: with a quota p50 %v p90 %v; without p50 %v p90 %v",
			rounds*n, pct(took["quota"], 50), pct(took["quota"], 90), pct(took["none"], 50), pct(took["none"], 90))
		if p, _ := adm.Project(ctx, "qlim"); p.Usage.Sandboxes != 0 {
			t.Errorf("usage after the deletes: %+v", p.Usage)
		}
	})
	for _, id := range mine {
		if err := a0.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if p, _ := adm.Project(ctx, "qa"); p.Usage.Sandboxes != 0 {
		t.Errorf("usage after deleting everything: %+v", p.Usage)
	}
	if err := adm.DeleteProject(ctx, "qa"); err != nil {
		t.Error(err)
	}
	e.projectGaps(ctx, t)

	t.Run("dsec server honours the same quotas", func(t *testing.T) {
		dir := filepath.Join(e.dir, "one")
		addr := freePort(t, "127.0.0.1")
		p := &proc{name: "server", args: []string{"server", "--data-dir", dir, "--node-name", "one",
			"--listen", addr, "--cleanup-on-exit"}}
		e.start(p)
		defer p.stop(syscall.SIGTERM)
		e.waitFor("dsec server listening", 60*time.Second, func() error {
			if !strings.Contains(p.logs.String(), "dsec server listening") {
				return fmt.Errorf("not yet:\n%s", p.logs.String())
			}
			return nil
		})
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		admTok := strings.TrimSpace(string(b))
		tokA := strings.TrimSpace(cli(t, e.bin, addr, admTok, "project", "create", "sa", "--max-sandboxes", "2", "--memory", "1g"))
		tokB := strings.TrimSpace(cli(t, e.bin, addr, admTok, "project", "create", "sb"))
		ca, cb := client.New("http://"+addr, tokA, client.WithRetry(0)), client.New("http://"+addr, tokB, client.WithRetry(0))
		s1, err := ca.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ca.Create(ctx, api.CreateSandboxRequest{MemoryBytes: 600 << 20})
		if errCode(err) != api.CodeQuotaExceeded || !strings.Contains(err.Error(), "memory_bytes") {
			t.Fatalf("over the memory quota: %v", err)
		}
		s2, err := ca.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.Create(ctx, api.CreateSandboxRequest{MemoryBytes: 1}); errCode(err) != api.CodeQuotaExceeded {
			t.Fatalf("3rd create: %v", err)
		}
		if _, err := cb.Get(ctx, s1.ID); errCode(err) != api.CodeNotFound {
			t.Fatalf("sb gets sa's sandbox: %v", err)
		}
		if l, _ := cb.List(ctx); len(l) != 0 {
			t.Fatalf("sb lists %d", len(l))
		}
		if err := ca.Delete(ctx, s1.ID); err != nil {
			t.Fatal(err)
		}
		s3, err := ca.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal("after a delete:", err)
		}
		for _, id := range []string{s2.ID, s3.ID} {
			if err := ca.Delete(ctx, id); err != nil {
				t.Error(err)
			}
		}
	})
}

// cli runs the dsec CLI against addr with tok and returns its stdout.
func cli(t *testing.T, bin, addr, tok string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+addr, "DSEC_TOKEN="+tok)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dsec %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// reportsCaughtUp reports (nil) whether the sandboxes the nodes' load reports
// count (as adm reads them) add up to those the projects list (one client
// per project: each lists its own).
func reportsCaughtUp(ctx context.Context, adm *client.Client, projects ...*client.Client) error {
	nodes, err := adm.Nodes(ctx)
	if err != nil {
		return err
	}
	live := 0
	for _, c := range projects {
		l, err := c.List(ctx)
		if err != nil {
			return err
		}
		live += len(l)
	}
	reported := int64(0)
	for _, n := range nodes {
		reported += n.Sandboxes
	}
	if reported != int64(live) {
		return fmt.Errorf("the nodes report %d sandboxes, the projects list %d", reported, live)
	}
	return nil
}
