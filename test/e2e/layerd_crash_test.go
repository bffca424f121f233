package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestLayerdKill9 kills the real `dsec layerd` with SIGKILL while a sandbox of a
// `dsec server` uses a layered environment: its holder (the same binary) starts
// layerd again, which takes the FUSE connection over, and the sandbox then reads
// data of the layer it never read before, with the right content. Stopping the
// server after the sandbox is deleted stops layerd and the holder and leaves
// nothing mounted.
func TestLayerdKill9(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	n := layeredNode(t)
	ctx := context.Background()
	tk := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tk, "opt", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, name := range []string{"a.bin", "b.bin"} {
		b := make([]byte, 3<<20)
		_, _ = rand.Read(b)
		os.WriteFile(filepath.Join(tk, "opt", "data", name), b, 0o644)
		s := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(s[:])+"  /opt/data/"+name)
	}
	n.image(t, "build", "--from", "dir:"+filepath.Join(imagesDir, "busybox", "rootfs"), "--name", "kb-base")
	n.image(t, "build", "--from", "dir:"+tk, "--name", "kb-data")
	n.image(t, "compose", "--name", "kbenv", "--base", "kb-base", "--toolkit", "kb-data")
	sb := n.create(t, api.CreateSandboxRequest{Image: "kbenv"})
	if r := n.sh(t, sb, "busybox echo up"); r.Stdout != "up\n" {
		t.Fatalf("sandbox: %+v", r)
	}

	root := paths.New(n.dataDir).Layers()
	lc := lazy.NewClient(lazy.Config{Root: root})
	for i, name := range []string{"a.bin", "b.bin"} {
		pid, ok := lc.Running(ctx)
		if !ok {
			t.Fatal("layerd not running")
		}
		t0 := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Read at once: the read waits in the kernel until layerd is back.
		r := n.sh(t, sb, "sha256sum /opt/data/"+name)
		if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != sums[i] {
			t.Fatalf("read after kill -9 of layerd: %+v (want %s)", r, sums[i])
		}
		p2, ok := lc.Running(ctx)
		if !ok || p2 == pid {
			t.Fatalf("layerd after the kill: %d %v", p2, ok)
		}
		t.Logf("kill -9 of layerd %d: sha256sum of 3 MiB never read before done %v later (layerd %d)", pid, time.Since(t0).Round(time.Millisecond), p2)
	}
	holder := lazy.HolderPid(root)
	pid, _ := lc.Running(ctx)
	if err := n.cl.Delete(ctx, sb); err != nil {
		t.Fatal(err)
	}
	n.stop(true) // SIGTERM: no sandbox left, so layerd and its holder stop too
	for _, p := range []int{pid, holder} {
		if !testwait.Until(10*time.Second, func() bool { return !(p > 0 && syscall.Kill(p, 0) == nil && !isZombie(p)) }) {
			t.Fatalf("process %d (layerd or its holder) still running after the server stopped with no sandboxes", p)
		}
	}
	if m := mountsUnder(n.dataDir); len(m) > 0 {
		t.Fatalf("mounts left after the server stopped with no sandboxes: %v", m)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}
