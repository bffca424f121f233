package fncall

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
)

// TestOutputLargerThanThePipe: a program writing more than its output pipe
// holds gets all of it delivered, and one writing past its limit is killed
// for it.
func TestOutputLargerThanThePipe(t *testing.T) {
	e, _ := smallEngine(t, 1)
	spec := quickSpec("/bin/sh", "-c", "head -c 3000000 /dev/zero; echo done >&2")
	spec.Limits.Output = 8 << 20
	r, err := bounded(t, "large output", func() (Result, error) { return e.Run(context.Background(), spec) })
	if err != nil || r.ExitCode != 0 || len(r.Stdout) != 3000000 || r.StdoutOver || string(r.Stderr) != "done\n" {
		t.Fatalf("3 MB of output: %d bytes, over %v, stderr %q, exit %d, %v", len(r.Stdout), r.StdoutOver, r.Stderr, r.ExitCode, err)
	}
	spec = quickSpec("/bin/sh", "-c", "while :; do head -c 65536 /dev/zero; done")
	spec.Limits.Output = 1 << 20
	r, err = bounded(t, "endless output", func() (Result, error) { return e.Run(context.Background(), spec) })
	if err != nil || !r.StdoutOver || r.Killed != "output" || len(r.Stdout) != 1<<20 {
		t.Fatalf("endless output: %d bytes, over %v, killed %q, %v", len(r.Stdout), r.StdoutOver, r.Killed, err)
	}
}

var cpusAllowed = regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`)

// TestProgramHasAllCPUs: the helper forks the program bound to its own CPU
// until it has exec'd; the program runs with every CPU the engine has from
// its first instruction. When the helper gave the CPUs back only whenever it
// next ran after the exec, 66 of 500 runs (12 with both cores busy) saw one
// CPU: 100 runs catch that.
func TestProgramHasAllCPUs(t *testing.T) {
	e, _ := smallEngine(t, 1)
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	want := cpusAllowed.FindSubmatch(own)
	for range 100 {
		spec := quickSpec("/bin/cat", "/proc/self/status")
		spec.Limits.Output = 64 << 10
		r, err := e.Run(context.Background(), spec)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("cat /proc/self/status: exit %d, %v, %s", r.ExitCode, err, r.Stderr)
		}
		got := cpusAllowed.FindSubmatch(r.Stdout)
		if got == nil || !bytes.Equal(got[1], want[1]) {
			t.Fatalf("program's CPUs %q, want the engine's %q", got, want[1])
		}
	}
}
