package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestDeleteAnswersStopped: Delete answers with the sandbox out of every
// view and its init dead; the rest of its teardown runs in the background. A
// node at its sandbox limit admits as many creates as it just deleted, at
// once, and nothing is left once the teardowns ended.
func TestDeleteAnswersStopped(t *testing.T) {
	const n = 6
	e := newEnv(t)
	m := e.open(t, func(c *agent.Config) { c.MaxSandboxes = n })
	var ids []string
	pids := map[string]int{}
	for range n {
		sb := create(t, m, api.CreateSandboxRequest{})
		ids = append(ids, sb.ID)
		pids[sb.ID] = e.initPID(t, sb.ID)
		// A background process: the sandbox has process logs to remove.
		if _, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := m.Delete(ctxT(t), id); err != nil {
				t.Errorf("Delete %s: %v", id, err)
				return
			}
			_, err := m.Get(ctxT(t), id)
			wantCode(t, "Get right after Delete", err, api.CodeNotFound)
			wantCode(t, "a second Delete", m.Delete(ctxT(t), id), api.CodeNotFound)
			_, err = m.Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"true"}})
			wantCode(t, "Exec right after Delete", err, api.CodeNotFound)
			if e.recordExists(id) {
				t.Errorf("%s: record kept after Delete", id)
			}
			if err := unix.Kill(pids[id], 0); !errors.Is(err, unix.ESRCH) {
				t.Errorf("%s: init pid %d after Delete answered: kill 0 = %v, want ESRCH", id, pids[id], err)
			}
		})
	}
	wg.Wait()
	if list, _ := m.List(ctxT(t)); len(list) != 0 {
		t.Errorf("%d sandboxes listed right after deleting all", len(list))
	}
	// The limit counts live sandboxes only: the same number again, at once.
	for range n {
		sb := create(t, m, api.CreateSandboxRequest{})
		shOK(t, m, sb.ID, "true")
	}
	if err := m.DeleteAll(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// DeleteAll returns with every teardown ended: nothing waits to go.
	if d := e.sandboxDirs(); len(d) != 0 {
		t.Errorf("sandbox dirs after DeleteAll: %v", d)
	}
	if cg := e.cgroupsOf(t); len(cg) != 0 {
		t.Errorf("cgroups after DeleteAll: %v", cg)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "logs")); len(ents) != 0 {
		t.Errorf("process logs after DeleteAll: %d dirs", len(ents))
	}
	e.requireEmpty(t, m, "after DeleteAll")
}

// TestRestartFinishesTeardown: an agent that stopped after a Delete had
// removed the sandbox's record, before its teardown ran (the record is
// removed first), leaves a running init, its cgroup, dirs and process logs;
// the next agent start releases all of it.
func TestRestartFinishesTeardown(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, nil)
	gone := create(t, m1, api.CreateSandboxRequest{})
	kept := create(t, m1, api.CreateSandboxRequest{})
	for _, id := range []string{gone.ID, kept.ID} {
		if _, err := m1.StartProcess(ctxT(t), id, api.ExecRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
	}
	pid := e.initPID(t, gone.ID)
	if err := m1.Close(); err != nil { // the agent stops; sandboxes keep running
		t.Fatal(err)
	}
	// Where a Delete stopped had the agent died right after its first step.
	if err := os.Remove(filepath.Join(e.dataDir, "sandboxes", gone.ID+".json")); err != nil {
		t.Fatal(err)
	}

	m2 := e.open(t, nil)
	if _, err := m2.Get(ctxT(t), gone.ID); err == nil {
		t.Fatalf("the deleted sandbox is back after the restart")
	}
	if got := shOK(t, m2, kept.ID, "echo here"); got != "here\n" {
		t.Fatalf("the other sandbox after the restart: %q", got)
	}
	waitFor(t, 10*time.Second, "the deleted sandbox's init to be gone", func() bool {
		return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
	})
	if _, err := os.Stat(filepath.Join(e.dataDir, "logs", gone.ID)); !os.IsNotExist(err) {
		t.Errorf("process logs of the deleted sandbox after the restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "logs", kept.ID)); err != nil {
		t.Errorf("process logs of the kept sandbox after the restart: %v", err)
	}
	for _, d := range e.sandboxDirs() {
		if d != kept.ID+".d" {
			t.Errorf("sandbox dir left after the restart: %s", d)
		}
	}
	if cg := e.cgroupsOf(t); len(cg) != 1 {
		t.Errorf("cgroups after the restart: %v, want the kept sandbox's", cg)
	}
	if err := m2.Delete(ctxT(t), kept.ID); err != nil {
		t.Fatal(err)
	}
	e.requireEmpty(t, m2, "after deleting the kept sandbox")
}

// TestDeleteEndsCallsInFlight: a blocking exec, a streaming exec, a process
// wait and a process follow waiting when their sandbox is deleted answer
// NotFound (the sandbox is gone), not the SIGKILL or lost connection their
// processes ended with.
func TestDeleteEndsCallsInFlight(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 1)
	errs := make(chan error, 4)
	go func() {
		_, err := m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}})
		errs <- fmt.Errorf("exec: %w", err)
	}()
	go func() {
		_, err := m.ExecStream(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}},
			session.Stream{Started: func(pid int) { started <- pid }})
		errs <- fmt.Errorf("exec stream: %w", err)
	}()
	go func() {
		_, err := m.WaitProcess(ctxT(t), sb.ID, p.ID)
		errs <- fmt.Errorf("wait process: %w", err)
	}()
	go func() {
		_, err := m.FollowProcess(ctxT(t), sb.ID, p.ID, api.FollowRequest{WaitMs: 60_000})
		errs <- fmt.Errorf("follow process: %w", err)
	}()
	<-started
	// Both execs run (two sleeps beside the background one) before the delete.
	if !testwait.Until(10*time.Second, func() bool {
		r, err := m.Exec(ctxT(t), sb.ID, api.ExecRequest{Shell: "cat /proc/[0-9]*/comm | grep -c '^sleep$'"})
		return err == nil && strings.TrimSpace(r.Stdout) == "3"
	}) {
		t.Fatal("the two execs never ran")
	}
	if err := m.Delete(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		select {
		case err := <-errs:
			wantCode(t, "a call in flight when its sandbox was deleted", err, api.CodeNotFound)
		case <-time.After(30 * time.Second):
			t.Fatal("a call in flight did not end with its sandbox")
		}
	}
}
