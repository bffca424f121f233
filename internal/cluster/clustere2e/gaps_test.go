package clustere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// projectGaps: trajectories scoped by project through both API servers; a
// retried request ID answered at the quota; the quota reconciler on one API
// server at a time, taken over when it dies; a lost node removed for good.
func (e *env) projectGaps(ctx context.Context, t *testing.T) {
	as := func(i int, tok string) *client.Client {
		return client.New("http://"+e.apiAddr[i], tok, client.WithRetry(0))
	}
	adm := e.client(0)
	pt, err := adm.CreateProject(ctx, "gt", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	po, err := adm.CreateProject(ctx, "go", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := adm.CreateProject(ctx, "gr", api.Quota{MaxSandboxes: 2})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("API server 1 accepts the new tokens", 10*time.Second, func() error {
		for _, tok := range []string{pt.Token, po.Token, pr.Token} {
			if _, err := as(1, tok).List(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	var cleanup []func()
	defer func() {
		for _, f := range cleanup {
			f()
		}
	}()

	t.Run("trajectories: another project's cannot be listed, read, deleted or replayed into, through either API server", func(t *testing.T) {
		t0, t1, o0, o1 := as(0, pt.Token), as(1, pt.Token), as(0, po.Token), as(1, po.Token)
		mine, err := t0.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := o1.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		cleanup = append(cleanup, func() { _ = t0.Delete(ctx, mine.ID); _ = o0.Delete(ctx, theirs.ID) })
		secret := api.ExecRequest{Cmd: []string{"echo", "gt-secret"}}
		if r, err := t0.Exec(client.WithTrajectory(ctx, "roll", 1), mine.ID, secret); err != nil || r.Stdout != "gt-secret\n" {
			t.Fatalf("gt's step: %+v %v", r, err)
		}
		if r, err := t1.Exec(client.WithTrajectory(ctx, "roll", 1), mine.ID, secret); err != nil || !r.Replayed {
			t.Fatalf("gt's replay through the other API server: %+v %v", r, err)
		}
		for i, o := range []*client.Client{o0, o1} {
			if l, err := o.ListTrajectories(ctx); err != nil || len(l) != 0 {
				t.Fatalf("API server %d: go lists %+v (%v)", i, l, err)
			}
			if _, err := o.GetTrajectory(ctx, "roll"); errCode(err) != api.CodeNotFound {
				t.Fatalf("API server %d: go reads gt's trajectory: %v", i, err)
			}
			if err := o.DeleteTrajectory(ctx, "roll"); errCode(err) != api.CodeNotFound {
				t.Fatalf("API server %d: go deletes gt's trajectory: %v", i, err)
			}
			if _, err := o.RebuildTrajectory(ctx, "roll"); errCode(err) != api.CodeNotFound {
				t.Fatalf("API server %d: go rebuilds gt's trajectory: %v", i, err)
			}
		}
		// go's "roll" is its own: its step 1 with gt's very command runs in
		// go's sandbox (nothing replayed from gt's log).
		marker := api.ExecRequest{Cmd: []string{"sh", "-c", "echo gt-secret; touch /tmp/ran"}}
		if _, err := t0.Exec(client.WithTrajectory(ctx, "roll2", 1), mine.ID, marker); err != nil {
			t.Fatal(err)
		}
		r, err := o1.Exec(client.WithTrajectory(ctx, "roll2", 1), theirs.ID, marker)
		if err != nil || r.Replayed {
			t.Fatalf("go's step 1 of its own roll2: %+v %v", r, err)
		}
		if r, err := o0.Exec(ctx, theirs.ID, api.ExecRequest{Cmd: []string{"ls", "/tmp/ran"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("go's step did not run in go's sandbox: %+v %v", r, err)
		}
		if l, _ := t1.ListTrajectories(ctx); len(l) != 2 {
			t.Fatalf("gt lists %+v", l)
		}
		if tr, err := t1.GetTrajectory(ctx, "roll"); err != nil || tr.ID != "roll" || tr.SandboxID != mine.ID {
			t.Fatalf("gt's trajectory through API server 1: %+v %v", tr, err)
		}
	})

	var held []string // gr's sandboxes (request IDs rq-1, rq-2)
	t.Run("a retried request_id is answered at the quota; a new one is refused", func(t *testing.T) {
		r0, r1 := as(0, pr.Token), as(1, pr.Token)
		s1, err := r0.Create(ctx, api.CreateSandboxRequest{RequestID: "rq-1"})
		if err != nil {
			t.Fatal(err)
		}
		batch := []api.CreateSandboxRequest{{RequestID: "rq-2"}}
		bs, err := r1.CreateBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		held = []string{s1.ID, bs[0].ID}
		cleanup = append(cleanup, func() {
			for _, id := range held {
				_ = r0.Delete(ctx, id)
			}
		})
		if _, err := r1.Create(ctx, api.CreateSandboxRequest{RequestID: "rq-3"}); errCode(err) != api.CodeQuotaExceeded {
			t.Fatalf("a new request ID at the quota: %v", err)
		}
		if again, err := r1.Create(ctx, api.CreateSandboxRequest{RequestID: "rq-1"}); err != nil || again.ID != s1.ID {
			t.Fatalf("rq-1 retried through the other API server at the quota: %+v %v", again, err)
		}
		if again, err := r0.CreateBatch(ctx, batch); err != nil || len(again) != 1 || again[0].ID != bs[0].ID {
			t.Fatalf("the batch re-sent whole at the quota: %+v %v", again, err)
		}
		if p, _ := adm.Project(ctx, "gr"); p.Usage.Sandboxes != 2 {
			t.Fatalf("gr's usage after the retries: %+v", p.Usage)
		}
	})

	t.Run("the quota reconciler runs on one API server; the other takes over when it dies", func(t *testing.T) {
		etcd, err := cluster.Connect(ctx, cluster.ClientConfig{Endpoints: e.etcdEPs})
		if err != nil {
			t.Fatal(err)
		}
		defer etcd.Close()
		leader := func() int {
			id, ok, err := cluster.Leader(ctx, etcd, "", apiserver.QuotaReconcilerTask)
			if err != nil || !ok {
				return -1
			}
			_, pid, _ := strings.Cut(id, " pid ")
			for i, p := range e.apis {
				if p.cmd.ProcessState == nil && strconv.Itoa(p.cmd.Process.Pid) == pid {
					return i
				}
			}
			return -1
		}
		reader := 0 // the API server usage is read through (one that stays up)
		// A reservation lost (with the usage it held): the leader adopts the
		// labelled sandboxes again within a reconcile round.
		lose := func(who int) {
			t.Helper()
			if _, err := etcd.Delete(ctx, "/dsec/quota/gr/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			e.waitFor(fmt.Sprintf("API server %d re-adopts gr's sandboxes", who), 20*time.Second, func() error {
				p, err := e.client(reader).Project(ctx, "gr")
				if err != nil || p.Usage.Sandboxes != 2 {
					return fmt.Errorf("usage %+v %v", p.Usage, err)
				}
				return nil
			})
		}
		reconciled := func(i int) int {
			return strings.Count(e.apis[i].logs.String(), `"quota reservation reconciled" project=gr`)
		}
		var lead int
		e.waitFor("a quota reconciler leader", 15*time.Second, func() error {
			if lead = leader(); lead < 0 {
				return fmt.Errorf("none")
			}
			return nil
		})
		other := 1 - lead
		reader = other
		before := reconciled(other)
		lose(lead)
		if reconciled(lead) == 0 || reconciled(other) != before {
			t.Fatalf("reconciled: leader (API server %d) %d times, the other %d (before %d)", lead, reconciled(lead), reconciled(other), before)
		}
		killed := time.Now()
		e.apis[lead].stop(syscall.SIGKILL)
		e.waitFor("API server "+strconv.Itoa(other)+" leads", cluster.DefaultElectionTTL+10*time.Second, func() error {
			if l := leader(); l != other {
				return fmt.Errorf("leader %d", l)
			}
			return nil
		})
		t.Logf("the quota reconciler moved to API server %d %v after its leader was killed (election TTL %v)",
			other, time.Since(killed).Round(100*time.Millisecond), cluster.DefaultElectionTTL)
		lose(other)
		if reconciled(other) == before {
			t.Fatalf("API server %d leads but did not reconcile", other)
		}
		e.startAPI(lead)
		if l := leader(); l != other {
			t.Errorf("a restarted API server took the lead from a live one: leader %d", l)
		}
	})

	t.Run("nodes rm: a lost node's records, env marks and claims go; refused while live, unknown is 404", func(t *testing.T) {
		images := os.Getenv("DSEC_IMAGES_DIR")
		if images == "" {
			images = "/var/lib/dsec/images"
		}
		if out, err := e.image("build", "--from", "dir:"+filepath.Join(images, "busybox", "rootfs"), "--name", "rm-base"); err != nil {
			t.Fatalf("image build: %v\n%s", err, out)
		}
		if out, err := e.image("compose", "--name", "rm-env", "--base", "rm-base"); err != nil {
			t.Fatalf("image compose: %v\n%s", err, out)
		}
		a := e.agents[len(e.agents)-1]
		sb, err := adm.Create(ctx, api.CreateSandboxRequest{Image: "rm-env", Node: a.node, RequestID: "rm-req"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adm.RemoveNode(ctx, a.node); errCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "live") {
			t.Fatalf("rm of a live node: %v", err)
		}
		if _, err := as(1, po.Token).RemoveNode(ctx, a.node); errCode(err) != api.CodePermissionDenied {
			t.Fatalf("rm by another project: %v", err)
		}
		if err := as(1, po.Token).SetDrain(ctx, a.node, true); errCode(err) != api.CodePermissionDenied {
			t.Fatalf("drain by another project: %v", err)
		}
		if _, err := e.client(1).RemoveNode(ctx, "no-such-node"); errCode(err) != api.CodeNotFound {
			t.Fatalf("rm of an unknown node: %v", err)
		}
		if r, err := e.client(1).Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("the refused rm changed something: %+v %v", r, err)
		}
		e.waitFor(a.node+" reports its sandbox", 10*time.Second, func() error {
			ns, err := e.client(1).Nodes(ctx)
			for _, n := range ns {
				if n.Name == a.node && n.Sandboxes >= 1 {
					return nil
				}
			}
			return fmt.Errorf("nodes %+v %v", ns, err)
		})
		a.stop(syscall.SIGKILL)
		e.waitFor(a.node+" lost", ttl+10*time.Second, func() error {
			ns, err := e.client(1).Nodes(ctx)
			for _, n := range ns {
				if n.Name == a.node && n.State == api.NodeLost {
					return nil
				}
			}
			return fmt.Errorf("nodes %+v %v", ns, err)
		})
		if out, err := e.image("rm", "rm-env"); err == nil || !strings.Contains(out, a.node) {
			t.Fatalf("image rm while the lost node marks it: %v\n%s", err, out)
		}
		out := cli(t, e.bin, e.apiAddr[1], e.token, "nodes", "rm", a.node, "--json")
		var res api.RemoveNodeResponse
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if res.Node != a.node || res.Sandboxes < 1 || len(res.EnvMarks) != 1 || res.EnvMarks[0] != "rm-env" || res.RequestClaims < 1 {
			t.Fatalf("dsec nodes rm: %+v", res)
		}
		for i := range e.apis {
			e.waitFor(fmt.Sprintf("API server %d forgets %s", i, a.node), 10*time.Second, func() error {
				if _, err := e.client(i).Get(ctx, sb.ID); errCode(err) != api.CodeNotFound {
					return fmt.Errorf("get: %v", err)
				}
				ns, _ := e.client(i).Nodes(ctx)
				for _, n := range ns {
					if n.Name == a.node {
						return fmt.Errorf("still listed: %+v", n)
					}
				}
				return nil
			})
		}
		if _, err := adm.RemoveNode(ctx, a.node); errCode(err) != api.CodeNotFound {
			t.Fatalf("rm again: %v", err)
		}
		if out, err := e.image("rm", "rm-env"); err != nil {
			t.Fatalf("image rm after nodes rm: %v\n%s", err, out)
		}
		// The claim went with the node: the retry is placed afresh.
		again, err := adm.Create(ctx, api.CreateSandboxRequest{RequestID: "rm-req"})
		if err != nil || again.ID == sb.ID {
			t.Fatalf("rm-req retried after nodes rm: %+v %v", again, err)
		}
		_ = adm.Delete(ctx, again.ID)
	})
}
