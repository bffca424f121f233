package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

var noMemory = func() *bool { f := false; return &f }()

// sleeps counts the sleep processes running in sandbox id.
const sleeps = `n=0; for c in /proc/[0-9]*/comm; do [ "$(cat $c 2>/dev/null)" = sleep ] && n=$((n+1)); done; echo $n`

// bootID reads sandbox id's boot id and checks it is its own: a UUID, not
// the host's, and read-only.
func bootID(t *testing.T, m *agent.Manager, id string) string {
	t.Helper()
	const f = "/proc/sys/kernel/random/boot_id"
	got := strings.TrimSpace(shOK(t, m, id, "cat "+f+"; echo x > "+f+" 2>/dev/null && echo WRITABLE; true"))
	host, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 36 || strings.Count(got, "-") != 4 || got == strings.TrimSpace(string(host)) {
		t.Fatalf("sandbox boot id %q (host %q): want a UUID of its own, read-only", got, strings.TrimSpace(string(host)))
	}
	return got
}

// TestPauseWithoutMemory: a filesystem-only pause kills the sandbox's
// processes and releases its cgroup but keeps its files (a deletion too) and
// its ID, across a restart of the agent; resume boots it afresh on them (a
// new boot id);
// pausing again stacks a second copy; a reset drops them all and a delete
// leaves nothing.
func TestPauseWithoutMemory(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	shOK(t, m, sb.ID, "mkdir -p /data && echo kept > /data/f && rm /etc/debian_version")
	if _, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "3600"}}); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, sb.ID, sleeps); got != "1\n" {
		t.Fatalf("sleeps before the pause: %q", got)
	}
	boot := bootID(t, m, sb.ID)
	res, err := m.PauseWith(ctxT(t), sb.ID, api.PauseRequest{Memory: noMemory})
	if err != nil {
		t.Fatalf("pause without memory: %v", err)
	}
	if res.State != api.StatePaused || res.ID != sb.ID {
		t.Fatalf("after the pause: %+v", res.Sandbox)
	}
	if cg := e.cgroupsOf(t); len(cg) != 0 {
		t.Fatalf("cgroups of a sandbox paused without memory: %v", cg)
	}
	_, err = m.Exec(ctxT(t), sb.ID, api.ExecRequest{Shell: "true"})
	wantCode(t, "exec while paused without memory", err, api.CodeConflict)
	_, err = m.Fork(ctxT(t), sb.ID, api.ForkRequest{Count: 1})
	wantCode(t, "fork while paused without memory", err, api.CodeConflict)
	_, err = m.PauseWith(ctxT(t), sb.ID, api.PauseRequest{Memory: noMemory})
	wantCode(t, "second pause without memory", err, api.CodeConflict)

	// The agent restarts: the sandbox is still there, paused.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = e.open(t, nil)
	if got, err := m.Get(ctxT(t), sb.ID); err != nil || got.State != api.StatePaused {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
	r, err := m.Resume(ctxT(t), sb.ID)
	if err != nil || r.State != api.StateRunning || r.ID != sb.ID {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if got := shOK(t, m, sb.ID, "cat /data/f; test -e /etc/debian_version && echo LEAK; "+sleeps); got != "kept\n0\n" {
		t.Fatalf("after resume: %q, want the files and no sleep", got)
	}
	if cg := e.cgroupsOf(t); len(cg) != 1 {
		t.Fatalf("cgroups after resume: %v", cg)
	}
	if b := bootID(t, m, sb.ID); b == boot {
		t.Fatalf("boot id %s unchanged by the pause without memory", b)
	}

	// Again: a later write survives a second pause too.
	shOK(t, m, sb.ID, "echo two > /data/g")
	if _, err := m.PauseWith(ctxT(t), sb.ID, api.PauseRequest{Memory: noMemory}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, sb.ID, "cat /data/f /data/g"); got != "kept\ntwo\n" {
		t.Fatalf("after a second pause: %q", got)
	}
	if d := e.forkDirs(); len(d) != 2 {
		t.Fatalf("copies kept: %v, want 2", d)
	}
	// A reset goes back to the image.
	if _, err := m.Reset(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, m, sb.ID, "test -e /data/f || echo gone; test -e /etc/debian_version && echo back"); got != "gone\nback\n" {
		t.Fatalf("after reset: %q", got)
	}
	if d := e.forkDirs(); len(d) != 0 {
		t.Fatalf("copies left after a reset: %v", d)
	}
	// At a deadline that says so; then deleted while paused: nothing stays.
	if _, err := m.SetDeadline(ctxT(t), sb.ID, api.DeadlineRequest{TimeoutSeconds: 60, OnExpiry: api.ExpiryPauseFilesystem}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(61 * time.Second)
	waitFor(t, 10*time.Second, "the sandbox to pause without memory at its deadline", func() bool {
		got, err := m.Get(ctxT(t), sb.ID)
		return err == nil && got.State == api.StatePaused && got.ExpiresAt == nil
	})
	if cg := e.cgroupsOf(t); len(cg) != 0 {
		t.Fatalf("cgroups after the deadline: %v", cg)
	}
	if err := m.Delete(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if d := e.forkDirsSettled(0); len(d) != 0 {
		t.Fatalf("copies left after delete: %v", d)
	}
	e.requireEmpty(t, m, "after delete")
}

// TestMockPauseWithoutMemoryRefused: a backend that cannot copy its writable
// layer (the mock) refuses a filesystem-only pause with not_implemented,
// naming the backend, and the sandbox runs on.
func TestMockPauseWithoutMemoryRefused(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	_, err := m.PauseWith(ctxT(t), sb.ID, api.PauseRequest{Memory: noMemory})
	wantCode(t, "pause without memory on the mock", err, api.CodeNotImplemented)
	if err == nil || !strings.Contains(err.Error(), `backend "mock"`) {
		t.Errorf("error %v does not name the backend", err)
	}
	if got, err := m.Get(ctxT(t), sb.ID); err != nil || got.State != api.StateRunning {
		t.Fatalf("after a refused pause: %+v %v", got, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "forks")); len(ents) != 0 {
		t.Fatalf("copies made: %d", len(ents))
	}
	_, err = m.SetDeadline(ctxT(t), sb.ID, api.DeadlineRequest{TimeoutSeconds: 60, OnExpiry: api.ExpiryPauseFilesystem})
	wantCode(t, "deadline pausing without memory on the mock", err, api.CodeNotImplemented)
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{TTLSeconds: 60, OnExpiry: api.ExpiryPauseFilesystem})
	wantCode(t, "create pausing without memory at its deadline on the mock", err, api.CodeNotImplemented)
	if list, _ := m.List(ctxT(t)); len(list) != 1 {
		t.Fatalf("%d sandboxes after a refused create", len(list))
	}
}
