package agent_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestCreateIdempotent(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)

	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := m.Create(ctxT(t), api.CreateSandboxRequest{RequestID: "req-same", Labels: map[string]string{"k": "v"}})
			ids[i], errs[i] = sb.ID, err
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if ids[i] == "" || ids[i] != ids[0] {
			t.Fatalf("concurrent creates with one request ID returned different sandboxes: %v", ids)
		}
	}
	if c := m.Count(); c != 1 {
		t.Fatalf("%d sandboxes after 8 creates with one request ID, want 1", c)
	}
	if d := e.sandboxDirs(); len(d) != 1 {
		t.Errorf("%d sandbox dirs, want 1", len(d))
	}
	sb, err := m.Get(ctxT(t), ids[0])
	if err != nil || sb.RequestID != "req-same" || sb.Labels["k"] != "v" {
		t.Errorf("Get: %+v, %v", sb, err)
	}

	// A failed create does not poison its request ID: the retry creates.
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{RequestID: "req-retry", Image: "no-such-image"})
	wantCode(t, "create with an unknown image", err, api.CodeNotFound)
	retry := create(t, m, api.CreateSandboxRequest{RequestID: "req-retry"})
	again := create(t, m, api.CreateSandboxRequest{RequestID: "req-retry"})
	if retry.ID == ids[0] || again.ID != retry.ID {
		t.Errorf("retry after failure: %s then %s (first sandbox %s)", retry.ID, again.ID, ids[0])
	}
	if c := m.Count(); c != 2 {
		t.Errorf("%d sandboxes, want 2", c)
	}
	// Once deleted, the request ID is free again.
	if err := m.Delete(ctxT(t), retry.ID); err != nil {
		t.Fatal(err)
	}
	if fresh := create(t, m, api.CreateSandboxRequest{RequestID: "req-retry"}); fresh.ID == retry.ID {
		t.Errorf("create after delete returned the deleted sandbox %s", fresh.ID)
	}
}

func TestCreateValidationLeavesNothing(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	for _, tc := range []struct {
		name string
		req  api.CreateSandboxRequest
		code api.Code
	}{
		{"negative memory", api.CreateSandboxRequest{MemoryBytes: -1}, api.CodeInvalidArgument},
		{"tiny memory", api.CreateSandboxRequest{MemoryBytes: 1 << 20}, api.CodeInvalidArgument},
		{"negative ttl", api.CreateSandboxRequest{TTLSeconds: -5}, api.CodeInvalidArgument},
		{"too many cpus", api.CreateSandboxRequest{CPU: 5000}, api.CodeInvalidArgument},
		{"bad env name", api.CreateSandboxRequest{Env: map[string]string{"A=B": "x"}}, api.CodeInvalidArgument},
		{"unknown backend", api.CreateSandboxRequest{Backend: api.BackendMicroVM}, api.CodeInvalidArgument},
		{"unknown image", api.CreateSandboxRequest{Image: "no-such-image"}, api.CodeNotFound},
		{"bad image name", api.CreateSandboxRequest{Image: "../debian"}, api.CodeInvalidArgument},
	} {
		tc.req.RequestID = "req-" + strings.ReplaceAll(tc.name, " ", "-")
		_, err := validated(m).Create(ctxT(t), tc.req)
		wantCode(t, tc.name, err, tc.code)
		e.requireEmpty(t, m, tc.name)
		// The request ID of a rejected create is usable.
		tc.req = api.CreateSandboxRequest{RequestID: tc.req.RequestID}
		sb := create(t, m, tc.req)
		if err := m.Delete(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.requireEmpty(t, m, "after deleting")
}

func TestReadoptAfterRestart(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, nil)
	var ids []string
	for i := range 3 {
		sb := create(t, m1, api.CreateSandboxRequest{RequestID: "readopt-" + string(rune('a'+i)),
			Env: map[string]string{"SANDBOX_NO": string(rune('0' + i))}})
		ids = append(ids, sb.ID)
	}
	shOK(t, m1, ids[1], "echo kept > /root/file")
	p, err := m1.StartProcess(ctxT(t), ids[1], api.ExecRequest{Shell: "echo started; sleep 3; echo finished; exit 42"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "background process output", func() bool {
		rc, err := m1.ProcessLogs(ctxT(t), ids[1], p.ID, "stdout", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b) == "started\n"
	})
	if err := m1.Close(); err != nil { // the agent stops; sandboxes keep running
		t.Fatal(err)
	}

	m2 := e.open(t, nil)
	list, err := m2.List(ctxT(t))
	if err != nil || len(list) != 3 {
		t.Fatalf("after restart: %d sandboxes listed (%v), want 3", len(list), err)
	}
	for i, sb := range list {
		if sb.ID != ids[i] || sb.State != api.StateRunning || sb.Env["SANDBOX_NO"] != string(rune('0'+i)) {
			t.Errorf("re-adopted sandbox %d: %+v, want %s running", i, sb, ids[i])
		}
	}
	if out := shOK(t, m2, ids[1], "cat /root/file"); out != "kept\n" {
		t.Errorf("file after restart: %q", out)
	}
	got, err := m2.GetProcess(ctxT(t), ids[1], p.ID)
	if err != nil || !got.Running || got.PID != p.PID {
		t.Errorf("re-attached process: %+v, %v (want running with pid %d)", got, err, p.PID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err = m2.WaitProcess(ctx, ids[1], p.ID)
	if err != nil || got.Running || got.Result == nil || got.Result.ExitCode != 42 {
		t.Fatalf("WaitProcess after restart: %+v (result %+v), %v; want exit 42", got, got.Result, err)
	}
	rc, err := m2.ProcessLogs(ctxT(t), ids[1], p.ID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "started\nfinished\n" {
		t.Errorf("process log across the restart: %q", b)
	}
	// Idempotency survives the restart too.
	if sb := create(t, m2, api.CreateSandboxRequest{RequestID: "readopt-a"}); sb.ID != ids[0] {
		t.Errorf("request ID after restart created %s, want the existing %s", sb.ID, ids[0])
	}
	// A new background process does not reuse the re-adopted one's ID.
	p2, err := m2.StartProcess(ctxT(t), ids[1], api.ExecRequest{Cmd: []string{"true"}})
	if err != nil || p2.ID == p.ID {
		t.Errorf("process after restart: %+v, %v (first was %s)", p2, err, p.ID)
	}

	if err := m2.DeleteAll(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.requireEmpty(t, m2, "after DeleteAll")
}

func TestCorruptRecordIsSetAside(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, nil)
	sb := create(t, m1, api.CreateSandboxRequest{})
	m1.Close()
	recs := filepath.Join(e.dataDir, "sandboxes")
	if err := os.WriteFile(filepath.Join(recs, "x.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A record whose name does not match its ID is corrupt too.
	if err := os.WriteFile(filepath.Join(recs, "y.json"), []byte(`{"id":"z"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	m2 := e.open(t, nil)
	list, _ := m2.List(ctxT(t))
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("after restart with a corrupt record: %+v, want only %s", list, sb.ID)
	}
	if out := shOK(t, m2, sb.ID, "echo ok"); out != "ok\n" {
		t.Errorf("exec in the adopted sandbox: %q", out)
	}
	for _, name := range []string{"x.json", "y.json"} {
		if _, err := os.Stat(filepath.Join(recs, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still in place: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(recs, name+".corrupt")); err != nil {
			t.Errorf("%s was not kept aside: %v", name, err)
		}
	}
}

func TestInitKilledExternally(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(e.initPID(t, sb.ID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "state exited", func() bool {
		got, err := m.Get(ctxT(t), sb.ID)
		return err == nil && got.State == api.StateExited
	})
	_, err = m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "Exec", err, api.CodeSandboxGone)
	_, err = m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "StartProcess", err, api.CodeSandboxGone)
	_, err = m.FS(ctxT(t), sb.ID)
	wantCode(t, "FS", err, api.CodeSandboxGone)
	_, err = m.Dial(ctxT(t), sb.ID, 80)
	wantCode(t, "Dial", err, api.CodeSandboxGone)
	_, err = m.Pause(ctxT(t), sb.ID)
	wantCode(t, "Pause", err, api.CodeSandboxGone)
	// The background process died with the sandbox, and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := m.WaitProcess(ctx, sb.ID, p.ID); err != nil || got.Running || got.Result == nil {
		t.Errorf("process of a dead sandbox: %+v, %v", got, err)
	}

	if err := m.Delete(ctxT(t), sb.ID); err != nil {
		t.Fatalf("Delete of an exited sandbox: %v", err)
	}
	_, err = m.Get(ctxT(t), sb.ID)
	wantCode(t, "Get after Delete", err, api.CodeNotFound)
	e.requireEmpty(t, m, "after deleting the exited sandbox")
}

func TestExpiry(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	gone := func(id string) func() bool {
		return func() bool {
			_, err := m.Get(ctxT(t), id)
			return err != nil
		}
	}
	stillThere := func(id, when string) {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // more than one tick of the expiry loop
		if _, err := m.Get(ctxT(t), id); err != nil {
			t.Fatalf("%s: sandbox expired too early: %v", when, err)
		}
	}

	idle := create(t, m, api.CreateSandboxRequest{IdleTimeoutSeconds: 30})
	e.clock.Advance(20 * time.Second)
	shOK(t, m, idle.ID, "true") // activity resets the idle timer
	e.clock.Advance(20 * time.Second)
	stillThere(idle.ID, "40s after create, 20s after the last exec")
	e.clock.Advance(11 * time.Second)
	waitFor(t, 5*time.Second, "the idle sandbox to expire", gone(idle.ID))
	if e.recordExists(idle.ID) {
		t.Errorf("record of the expired idle sandbox is still there")
	}

	ttl := create(t, m, api.CreateSandboxRequest{TTLSeconds: 60})
	if ttl.ExpiresAt == nil || !ttl.ExpiresAt.Equal(ttl.CreatedAt.Add(60*time.Second)) {
		t.Errorf("ExpiresAt = %v, want CreatedAt+60s (%v)", ttl.ExpiresAt, ttl.CreatedAt)
	}
	e.clock.Advance(50 * time.Second)
	shOK(t, m, ttl.ID, "true") // activity does not extend a TTL
	stillThere(ttl.ID, "50s into a 60s TTL")
	e.clock.Advance(11 * time.Second)
	waitFor(t, 5*time.Second, "the TTL sandbox to expire", gone(ttl.ID))
	e.requireEmpty(t, m, "after expiry")
}

func TestMaxSandboxes(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, func(c *agent.Config) { c.MaxSandboxes = 2 })
	a := create(t, m, api.CreateSandboxRequest{})
	create(t, m, api.CreateSandboxRequest{})
	_, err := m.Create(ctxT(t), api.CreateSandboxRequest{RequestID: "over"})
	wantCode(t, "create over the limit", err, api.CodeResourceExhausted)
	if c := m.Count(); c != 2 {
		t.Errorf("%d sandboxes, want 2", c)
	}
	if d := e.sandboxDirs(); len(d) != 2 {
		t.Errorf("%d sandbox dirs after a refused create, want 2", len(d))
	}
	if err := m.Delete(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	create(t, m, api.CreateSandboxRequest{RequestID: "over"})
}

func TestPauseResumeReset(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{Labels: map[string]string{"keep": "me"}})
	shOK(t, m, sb.ID, "echo before > /root/state")
	if _, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}

	got, err := m.Pause(ctxT(t), sb.ID)
	if err != nil || got.State != api.StatePaused {
		t.Fatalf("Pause: %+v, %v", got, err)
	}
	_, err = m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "Exec while paused", err, api.CodeConflict)
	_, err = m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "StartProcess while paused", err, api.CodeConflict)
	if got, _ := m.Get(ctxT(t), sb.ID); got.State != api.StatePaused {
		t.Errorf("Get while paused: state %q", got.State)
	}
	got, err = m.Resume(ctxT(t), sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("Resume: %+v, %v", got, err)
	}
	if out := shOK(t, m, sb.ID, "cat /root/state"); out != "before\n" {
		t.Errorf("after resume: %q", out)
	}

	// Reset works from a paused sandbox too.
	if _, err := m.Pause(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	pidBefore := e.initPID(t, sb.ID)
	got, err = m.Reset(ctxT(t), sb.ID)
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got.ID != sb.ID || got.State != api.StateRunning || got.Labels["keep"] != "me" {
		t.Errorf("after Reset: %+v", got)
	}
	if pid := e.initPID(t, sb.ID); pid == pidBefore {
		t.Errorf("Reset kept the old init %d", pid)
	}
	res := execOK(t, m, sb.ID, api.ExecRequest{Shell: "test -e /root/state"})
	if res.ExitCode == 0 {
		t.Errorf("file written before Reset survived it")
	}
	if procs, _ := m.ListProcesses(ctxT(t), sb.ID); len(procs) != 0 {
		t.Errorf("processes after Reset: %+v", procs)
	}
	// The old processes are gone: no sleep is left.
	if res := execOK(t, m, sb.ID, api.ExecRequest{Shell: "cat /proc/[0-9]*/comm | grep -c '^sleep$'"}); res.Stdout != "0\n" {
		t.Errorf("sleep processes after Reset: %q", res.Stdout)
	}
	if list, _ := m.List(ctxT(t)); len(list) != 1 {
		t.Errorf("%d sandboxes after Reset, want 1", len(list))
	}
	if d := e.sandboxDirs(); len(d) != 1 {
		t.Errorf("sandbox dirs after Reset: %v", d)
	}
}
