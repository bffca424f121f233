package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// forkDirs lists the fork copies under the agent's data dir.
// forkDirsSettled is forkDirs once it holds want entries, or after 10 s: a
// deleted sandbox's copies go with its teardown, in the background.
func (e *env) forkDirsSettled(want int) []string {
	testwait.Until(10*time.Second, func() bool { return len(e.forkDirs()) == want })
	return e.forkDirs()
}

func (e *env) forkDirs() []string {
	ents, _ := os.ReadDir(filepath.Join(e.dataDir, "forks"))
	var out []string
	for _, x := range ents {
		out = append(out, x.Name())
	}
	return out
}

// TestFork: children see the parent's files (including a deletion and a
// replaced directory), their writes are private, the parent's later writes do
// not reach them, they outlive the parent, and the copy goes with the last child.
func TestFork(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	p := create(t, m, api.CreateSandboxRequest{Env: map[string]string{"FROM": "parent"}, Labels: map[string]string{"job": "grpo"}})
	shOK(t, m, p.ID, `echo base > /work.txt && mkdir -p /data/sub && echo x > /data/sub/f && rm /etc/debian_version &&
		rm -rf /usr/share/doc && mkdir /usr/share/doc && echo mine > /usr/share/doc/only`)

	res, err := m.Fork(ctxT(t), p.ID, api.ForkRequest{Count: 3, Overrides: &api.CreateSandboxRequest{Labels: map[string]string{"member": "yes"}}})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if len(res.Children) != 3 || res.Parent != p.ID {
		t.Fatalf("fork result %+v", res)
	}
	c := res.Children
	for _, ch := range c {
		if ch.ID == p.ID || ch.Labels["job"] != "grpo" || ch.Labels["member"] != "yes" || ch.MemoryBytes != p.MemoryBytes {
			t.Fatalf("child %+v: want the parent's labels, limits and the override", ch)
		}
		got := shOK(t, m, ch.ID, `cat /work.txt /data/sub/f; test -e /etc/debian_version && echo LEAK; ls /usr/share/doc; echo $FROM
			grep -c "$(hostname)" /etc/hosts`)
		if got != "base\nx\nonly\nparent\n1\n" {
			t.Fatalf("child %s sees %q", ch.ID, got)
		}
	}
	// Private writes, in both directions.
	shOK(t, m, c[0].ID, "echo zero > /work.txt && echo c0 > /c0")
	shOK(t, m, p.ID, "echo later > /work.txt && echo p > /after")
	if got := shOK(t, m, c[1].ID, "cat /work.txt; ls /c0 /after 2>&1 | grep -c 'No such'"); got != "base\n2\n" {
		t.Fatalf("child 1 sees %q: writes leaked", got)
	}
	if got := shOK(t, m, p.ID, "cat /work.txt; test -e /c0 || echo none"); got != "later\nnone\n" {
		t.Fatalf("parent sees %q", got)
	}
	// A reset child goes back to the fork point.
	if _, err := m.Reset(ctxT(t), c[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, c[0].ID, "cat /work.txt; test -e /c0 || echo none"); got != "base\nnone\n" {
		t.Fatalf("reset child sees %q", got)
	}
	// The parent goes; the children keep working.
	if err := m.Delete(ctxT(t), p.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, c[2].ID, "cat /work.txt && echo new > /n && cat /n"); got != "base\nnew\n" {
		t.Fatalf("after parent delete: %q", got)
	}
	if len(e.forkDirs()) != 1 {
		t.Fatalf("fork copies: %v", e.forkDirs())
	}
	for _, ch := range c {
		if err := m.Delete(ctxT(t), ch.ID); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.forkDirsSettled(0); len(d) != 0 {
		t.Fatalf("fork copy left after the last child: %v", d)
	}
}

// TestForkPausedAndChained: a paused parent forks and stays paused; a child
// forks again (its children see both generations' files).
func TestForkPausedAndChained(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	p := create(t, m, api.CreateSandboxRequest{})
	shOK(t, m, p.ID, "echo one > /gen1")
	if _, err := m.Pause(ctxT(t), p.ID); err != nil {
		t.Fatal(err)
	}
	res, err := m.Fork(ctxT(t), p.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork of a paused parent: %v", err)
	}
	if sb, _ := m.Get(ctxT(t), p.ID); sb.State != api.StatePaused {
		t.Fatalf("parent state after fork: %s", sb.State)
	}
	c := res.Children[0]
	shOK(t, m, c.ID, "echo two > /gen2")
	res2, err := m.Fork(ctxT(t), c.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, res2.Children[0].ID, "cat /gen1 /gen2"); got != "one\ntwo\n" {
		t.Fatalf("grandchild sees %q", got)
	}
	if _, err := m.Resume(ctxT(t), p.ID); err != nil {
		t.Fatal(err)
	}
}

// TestForkBadInput: a count of 0 or over the maximum, overrides that change
// the image, an unknown sandbox: clear errors, and no sandbox or copy made.
func TestForkBadInput(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, func(c *agent.Config) { c.MaxFork = 4 })
	p := create(t, m, api.CreateSandboxRequest{})
	for _, tc := range []struct {
		name string
		id   string
		req  api.ForkRequest
		code api.Code
	}{
		{"count 0", p.ID, api.ForkRequest{Count: 0}, api.CodeInvalidArgument},
		{"count over max", p.ID, api.ForkRequest{Count: 5}, api.CodeInvalidArgument},
		{"negative", p.ID, api.ForkRequest{Count: -1}, api.CodeInvalidArgument},
		{"image override", p.ID, api.ForkRequest{Count: 1, Overrides: &api.CreateSandboxRequest{Image: "busybox"}}, api.CodeInvalidArgument},
		{"bad limit", p.ID, api.ForkRequest{Count: 1, Overrides: &api.CreateSandboxRequest{MemoryBytes: 1}}, api.CodeInvalidArgument},
		{"unknown", "test-nosuchsandbox", api.ForkRequest{Count: 1}, api.CodeNotFound},
	} {
		_, err := m.Fork(ctxT(t), tc.id, tc.req)
		wantCode(t, tc.name, err, tc.code)
	}
	if list, _ := m.List(ctxT(t)); len(list) != 1 {
		t.Fatalf("%d sandboxes after refused forks", len(list))
	}
	if d := e.forkDirs(); len(d) != 0 {
		t.Fatalf("fork copies after refused forks: %v", d)
	}
}

// failingDriver fails every Start after the first ok ones.
type failingDriver struct {
	driver.Driver
	ok atomic.Int32
}

func (d *failingDriver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	if d.ok.Add(-1) < 0 {
		return nil, errdefs.Internal(errors.New("injected"), "start sandbox")
	}
	return d.Driver.Start(ctx, spec)
}

// TestForkAllOrNothing: when a child fails part-way, the children already
// made are deleted and the copy removed; the parent is untouched.
func TestForkAllOrNothing(t *testing.T) {
	e := newEnv(t)
	fd := &failingDriver{}
	m := e.open(t, func(c *agent.Config) {
		fd.Driver = c.Driver
		c.Driver = fd
	})
	fd.ok.Store(3) // the parent and two children
	p := create(t, m, api.CreateSandboxRequest{})
	shOK(t, m, p.ID, "echo x > /x")
	_, err := m.Fork(ctxT(t), p.ID, api.ForkRequest{Count: 4})
	wantCode(t, "fork failing at child 3", err, api.CodeInternal)
	if list, _ := m.List(ctxT(t)); len(list) != 1 || list[0].ID != p.ID {
		t.Fatalf("sandboxes after a failed fork: %+v", list)
	}
	if d := e.forkDirsSettled(0); len(d) != 0 {
		t.Fatalf("fork copies after a failed fork: %v", d)
	}
	if got := shOK(t, m, p.ID, "cat /x"); got != "x\n" {
		t.Fatalf("parent after failed fork: %q", got)
	}
}

// countingPacker records whether a commit got as far as packing.
type countingPacker struct{ calls atomic.Int32 }

func (p *countingPacker) Pack(ctx context.Context, name string, base image.Image, dirs []string) (api.CommitResult, error) {
	p.calls.Add(1)
	return api.CommitResult{}, errors.New("not reached")
}

// TestMockForkCommitRefused: a backend without the fork and commit
// capabilities (the mock) refuses both with not_implemented, and nothing is
// made: no sandbox, no fork copy, no pack.
func TestMockForkCommitRefused(t *testing.T) {
	e := newMockEnv(t)
	reg, err := driver.NewRegistry(e.driver(t, "", false))
	if err != nil {
		t.Fatal(err)
	}
	pk := &countingPacker{}
	m, err := agent.New(ctxT(t), agent.Config{DataDir: e.dataDir, Drivers: reg, Images: e.store, Node: "test", Packer: pk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.DeleteAll(ctxT(t)); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
	})
	sb := create(t, m, api.CreateSandboxRequest{})
	_, err = m.Fork(ctxT(t), sb.ID, api.ForkRequest{Count: 2})
	wantCode(t, "fork on the mock", err, api.CodeNotImplemented)
	_, err = m.Commit(ctxT(t), sb.ID, api.CommitRequest{Name: "from-mock"})
	wantCode(t, "commit on the mock", err, api.CodeNotImplemented)
	if list, _ := m.List(ctxT(t)); len(list) != 1 {
		t.Fatalf("%d sandboxes after refused forks", len(list))
	}
	if n := pk.calls.Load(); n != 0 {
		t.Fatalf("packer called %d times", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "forks")); len(ents) != 0 {
		t.Fatalf("fork copies: %d", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "commits")); len(ents) != 0 {
		t.Fatalf("commit scratch left: %d", len(ents))
	}
}

// TestForkAcrossRestart: the agent restarts (sandboxes keep running); the
// children and their copy are re-adopted, an orphaned copy is removed at
// start, and the copy goes with the last child.
func TestForkAcrossRestart(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, nil)
	p := create(t, m1, api.CreateSandboxRequest{})
	shOK(t, m1, p.ID, "echo kept > /k")
	res, err := m1.Fork(ctxT(t), p.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Children[0].ID
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(e.dataDir, "forks", "sb-orphan")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	m2 := e.open(t, nil)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphaned fork copy kept: %v", err)
	}
	if got := shOK(t, m2, c, "cat /k"); got != "kept\n" {
		t.Fatalf("child after restart: %q", got)
	}
	if d := e.forkDirs(); len(d) != 1 {
		t.Fatalf("fork copies after restart: %v", d)
	}
	if err := m2.Delete(ctxT(t), c); err != nil {
		t.Fatal(err)
	}
	if d := e.forkDirsSettled(0); len(d) != 0 {
		t.Fatalf("fork copy left after its child: %v", d)
	}
}
