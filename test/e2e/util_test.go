package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
)

func fmtSscan(s string, v any) (int, error) { return fmt.Sscan(s, v) }

// cgroupText reads a file of a sandbox's cgroup, on a v1 or a v2 host, following
// the container driver's naming (dsec-<hash of its state dir>/<id>).
func (n *node) cgroupText(t *testing.T, id, controller, file string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(filepath.Join(n.dataDir, "containers")))
	name := filepath.Join("dsec-"+hex.EncodeToString(sum[:4]), id, file)
	for _, p := range []string{filepath.Join("/sys/fs/cgroup", controller, name), filepath.Join("/sys/fs/cgroup", name)} {
		if b, err := os.ReadFile(p); err == nil {
			return string(b)
		}
	}
	t.Fatalf("cgroup file %s of %s not found", file, id)
	return ""
}

func (n *node) cgroupInt(t *testing.T, id, controller, file string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(n.cgroupText(t, id, controller, file)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// waitSandboxProc waits up to 30 s until a process running argv exists in
// sandbox id (running) or none does. It looks from the host (/proc, the
// process's cgroup naming the sandbox): an exec in the sandbox may queue behind
// the command it looks for.
func waitSandboxProc(t *testing.T, id string, running bool, argv ...string) {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	count := func() int {
		c := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if e.Name()[0] < '0' || e.Name()[0] > '9' {
				continue
			}
			cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
			if string(cmd) == want && strings.Contains(string(cg), id) {
				c++
			}
		}
		return c
	}
	var c int
	if !testwait.Until(30*time.Second, func() bool { c = count(); return (c > 0) == running }) {
		t.Fatalf("%q in %s: %d processes after 30 s (want running: %v)", argv, id, c, running)
	}
}
