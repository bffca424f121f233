package racecheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"A=1"}, "GORACE=halt_on_error=1"},
		{[]string{"GORACE=history_size=3 halt_on_error=0", "A=1"}, "GORACE=history_size=3 halt_on_error=1"},
		{[]string{"GORACE=atexit_sleep_ms=0"}, "GORACE=atexit_sleep_ms=0 halt_on_error=1"},
	} {
		got := Env(c.in)
		var gorace []string
		for _, kv := range got {
			if strings.HasPrefix(kv, "GORACE=") {
				gorace = append(gorace, kv)
			}
		}
		if len(gorace) != 1 || gorace[0] != c.want {
			t.Errorf("Env(%q) GORACE = %q, want [%q]", c.in, gorace, c.want)
		}
		if slices.Contains(c.in, "A=1") && !slices.Contains(got, "A=1") {
			t.Errorf("Env(%q) = %q: lost A=1", c.in, got)
		}
	}
}

// racy races on a counter, then prints "survived" and exits 0: with
// halt_on_error=1 it never gets there.
const racy = `package main

import (
	"fmt"
	"time"
)

func main() {
	n := 0
	done := make(chan bool)
	go func() { n++; done <- true }()
	n++
	<-done
	time.Sleep(100 * time.Millisecond)
	fmt.Println("survived", n)
}
`

// TestPlantedRace builds a program with a data race under -race and runs it as
// the suites run dsec: Check must fail it, on the report and on the exit status.
func TestPlantedRace(t *testing.T) {
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "racy.go"), filepath.Join(dir, "racy")
	if err := os.WriteFile(src, []byte(racy), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-race", "-o", bin, src)
	build.Dir = dir
	build.Env = append(os.Environ(), "GO111MODULE=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -race: %v\n%s", err, out)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = Env(os.Environ())
	cmd.Stdout, cmd.Stderr = &logs, &logs
	_ = cmd.Run()
	if strings.Contains(logs.String(), "survived") {
		t.Errorf("the racy program ran on after its race (halt_on_error not set?):\n%s", logs.String())
	}
	err := Check("racy", logs.String(), cmd.ProcessState, syscall.SIGKILL)
	if err == nil || !strings.Contains(err.Error(), Marker) {
		t.Fatalf("Check = %v, want a race report:\n%s", err, logs.String())
	}
	// Without the report in hand, the exit status alone still fails it.
	if err := Check("racy", "", cmd.ProcessState, 0); err == nil || !strings.Contains(err.Error(), "status 66") {
		t.Errorf("Check on the exit status alone = %v, want exit status 66", err)
	}
}

func TestCheckExits(t *testing.T) {
	run := func(t *testing.T, kill syscall.Signal, args ...string) *os.ProcessState {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if kill != 0 {
			_ = cmd.Process.Signal(kill)
		}
		_ = cmd.Wait()
		return cmd.ProcessState
	}
	if err := Check("true", "fine\n", run(t, 0, "true"), 0); err != nil {
		t.Errorf("a clean exit: %v", err)
	}
	if err := Check("false", "", run(t, 0, "sh", "-c", "exit 3"), syscall.SIGKILL); err == nil {
		t.Error("exit 3 passed")
	}
	killed := run(t, syscall.SIGKILL, "sleep", "60")
	if err := Check("sleep", "", killed, syscall.SIGKILL); err != nil {
		t.Errorf("killed by the test's own SIGKILL: %v", err)
	}
	if err := Check("sleep", "", killed, 0); err == nil {
		t.Error("a SIGKILL the test did not send passed")
	}
	if err := Check("sleep", "", killed, syscall.SIGTERM); err == nil {
		t.Error("SIGKILL passed where the test sent SIGTERM")
	}
	if err := Check("x", "log\n"+Marker+"\nRead at ...\n", run(t, 0, "true"), 0); err == nil {
		t.Error("a race report in a clean exit's log passed")
	}
}
