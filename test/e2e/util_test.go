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
