package container_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"golang.org/x/sys/unix"
)

// TestExecReusesConnection: sequential execs in one sandbox go over one
// control connection to its init (no socket, connect and accept per exec),
// and each still gets its own output and exit status.
func TestExecReusesConnection(t *testing.T) {
	lower := requireImage(t, "busybox")
	d := newDriverFactory(testConfig(t))(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: drivertest.NewID("cr"), Layers: lower, Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64}
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(inst.State(), &st); err != nil || st.PID <= 0 {
		t.Fatalf("state %s: %v", inst.State(), err)
	}
	run := func(i int) {
		t.Helper()
		var out bytes.Buffer
		p, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%7)},
			Env: []string{"PATH=/bin"}, Cwd: "/"}, driver.Stdio{Stdout: &out})
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		ex, err := p.Wait(ctx)
		p.Close()
		if err != nil || ex.Code != i%7 || out.String() != fmt.Sprintf("%d\n", i) {
			t.Fatalf("exec %d: exit %+v, output %q, %v", i, ex, out.String(), err)
		}
	}
	run(0)
	first := initSockets(t, st.PID)
	for i := 1; i < 20; i++ {
		run(i)
	}
	if last := initSockets(t, st.PID); !slices.Equal(first, last) {
		t.Fatalf("the init's sockets changed over 19 execs: %v, then %v (a connection per exec)", first, last)
	}
	if len(first) != 2 {
		t.Fatalf("the init holds %d sockets after one exec, want 2 (the listener and one idle connection): %v", len(first), first)
	}
}

// initSockets lists the socket inodes the init process holds.
func initSockets(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			socks = append(socks, l)
		}
	}
	slices.Sort(socks)
	return socks
}

// TestCloseEndsBlockedWait: closing a process whose Wait is blocked (a
// background process the agent detaches from) ends that Wait rather than
// keeping the connection for reuse.
func TestCloseEndsBlockedWait(t *testing.T) {
	lower := requireImage(t, "busybox")
	d := newDriverFactory(testConfig(t))(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("cw"), Layers: lower, Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	p, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"sleep", "100"}, Env: []string{"PATH=/bin"}, Cwd: "/", Tag: "bg"}, driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := p.Wait(ctx); waited <- err }()
	time.Sleep(50 * time.Millisecond) // let Wait block on the connection (it must end either way)
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked behind a pending Wait")
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after Close")
	}
}

// TestSignalAfterCloseReachesNothing: a process closed after it ended gives
// its connection to the sandbox's next exec; a signal sent through the closed
// process afterwards (a kill racing the process's own end) does nothing, and
// above all does not reach the process now on that connection.
func TestSignalAfterCloseReachesNothing(t *testing.T) {
	lower := requireImage(t, "busybox")
	d := newDriverFactory(testConfig(t))(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("cs"), Layers: lower, Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	spec := func(args ...string) driver.ProcSpec {
		return driver.ProcSpec{Args: args, Env: []string{"PATH=/bin"}, Cwd: "/"}
	}
	done, err := inst.Exec(ctx, spec("true"), driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	done.Close()
	var out bytes.Buffer
	next, err := inst.Exec(ctx, spec("sh", "-c", "echo up; sleep 2; echo still running"), driver.Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := done.Signal(int(unix.SIGKILL)); err != nil {
		t.Errorf("a signal to a closed process: %v, want nothing done", err)
	}
	ex, err := next.Wait(ctx)
	if err != nil || ex.Code != 0 || ex.Signal != 0 || out.String() != "up\nstill running\n" {
		t.Fatalf("the next exec on the connection: %+v %v, output %q; want it untouched", ex, err, out.String())
	}
}
