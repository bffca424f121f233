package e2e

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/vm/fullvm"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestFullVM drives one full VM through the real server and the CLI: bad
// input first (nothing left behind), not_implemented for a backend without
// a display, then create on the desktop image, exec, files, a screenshot
// that shows the desktop (dsec screenshot), text typed into the terminal
// (dsec input) that the guest's shell writes to a file, a server restart
// that re-adopts the VM, and delete that leaves no process or file. One
// guest for all of it: a TCG boot of the desktop takes one to two minutes.
func TestFullVM(t *testing.T) {
	if err := fullvm.Available(""); err != nil {
		t.Skipf("no fullvm base image (run scripts/setup.sh): %v", err)
	}
	n := startNode(t)
	ctx := context.Background()
	info, err := n.cl.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(info.Backends, ","), "fullvm") {
		t.Fatalf("info: backends %v, want fullvm", info.Backends)
	}
	for _, req := range []api.CreateSandboxRequest{
		{Backend: "fullvm", Image: "busybox", MemoryBytes: 512 << 20}, // no kernel
		{Backend: "fullvm", Image: "desktop", MemoryBytes: 128 << 20}, // below the minimum
	} {
		_, err := n.cl.Create(ctx, req)
		if ae, ok := api.AsError(err); !ok || ae.Code != api.CodeInvalidArgument {
			t.Errorf("create %+v: %v, want invalid_argument", req, err)
		} else {
			t.Logf("refused: %v", err)
		}
	}
	if sbs, _ := n.cl.List(ctx); len(sbs) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", sbs)
	}
	vms := filepath.Join(n.dataDir, "fullvm", "vms")
	if ents, _ := os.ReadDir(vms); len(ents) != 0 || len(qemuOf(t, n.dataDir)) != 0 {
		t.Errorf("refused creates left VM dirs %v or QEMU processes", ents)
	}
	// A container has no display: 501 through the API and the CLI.
	c, err := n.cl.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.cl.Screenshot(ctx, c.ID); !isCode(err, api.CodeNotImplemented) {
		t.Errorf("screenshot of a container: %v, want not_implemented", err)
	}
	if _, stderr, code := n.cli(t, "", "input", c.ID, "--key", "ret"); code == 0 || !strings.Contains(stderr, "not_implemented") {
		t.Errorf("dsec input on a container: exit %d, %q; want not_implemented", code, stderr)
	}
	_ = n.cl.Delete(ctx, c.ID)

	t0 := time.Now()
	sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{Backend: "fullvm", Image: "desktop", MemoryBytes: 512 << 20})
	if err != nil {
		t.Fatalf("create fullvm: %v", err)
	}
	id := sb.ID
	t.Logf("create → agent answers: %v", time.Since(t0))
	if sb.Backend != "fullvm" || sb.VM == nil || sb.VM.Accel == "" {
		t.Errorf("sandbox %+v: want backend fullvm with vm.accel", sb)
	}
	// The agent answers before X is up: wait for it (60 s).
	if r := n.sh(t, id, "for i in $(seq 300); do pidof Xorg >/dev/null && break; sleep 0.2; done; uname -r; pidof Xorg >/dev/null && echo xorg"); r.ExitCode != 0 || !strings.Contains(r.Stdout, "xorg") || !strings.HasPrefix(r.Stdout, "6.1.") {
		t.Errorf("guest: %+v, want Debian's 6.1 kernel with Xorg running", r)
	}
	if _, err := n.cl.WriteFile(ctx, id, "/root/note.txt", 0o644, strings.NewReader("from the host\n")); err != nil {
		t.Fatal(err)
	}
	if r := n.sh(t, id, "cat /root/note.txt"); r.Stdout != "from the host\n" {
		t.Errorf("file written through the API: %q", r.Stdout)
	}

	// The desktop in a screenshot, through the CLI.
	shot := filepath.Join(t.TempDir(), "screen.png")
	var why string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, stderr, code := n.cli(t, "", "screenshot", id, shot); code != 0 {
			t.Fatalf("dsec screenshot: exit %d: %s", code, stderr)
		}
		b, _ := os.ReadFile(shot)
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("dsec screenshot wrote no valid PNG: %v", err)
		}
		var ok bool
		if ok, why = fullvm.DesktopShown(img); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no desktop in the screenshot (%s)", why)
		}
		time.Sleep(time.Second)
	}
	t.Logf("create → desktop in a screenshot: %v (%s)", time.Since(t0), why)

	// Typed text runs in the terminal and the guest writes the file.
	t.Log("typing")
	if _, stderr, code := n.cli(t, "", "input", id, "--text", `echo hi > /tmp/typed\n`); code != 0 {
		t.Fatalf("dsec input --text: exit %d: %s", code, stderr)
	}
	got := ""
	for i := 0; i < 50 && got != "hi\n"; i++ {
		if rc, err := n.cl.ReadFile(ctx, id, "/tmp/typed"); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			got = string(b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != "hi\n" {
		t.Errorf("/tmp/typed = %q after dsec input --text, want %q", got, "hi\n")
	}
	if _, stderr, code := n.cli(t, "", "input", id, "--click", "nowhere"); code == 0 || !strings.Contains(stderr, "X,Y") {
		t.Errorf("dsec input --click nowhere: exit %d, %q", code, stderr)
	}
	if _, stderr, code := n.cli(t, "", "input", id, "--key", "hyperspace"); code == 0 || !strings.Contains(stderr, "invalid_argument") {
		t.Errorf("dsec input --key hyperspace: exit %d, %q", code, stderr)
	}

	// Pause and resume; a restart of the server re-adopts the VM.
	t.Log("pause, resume, restart")
	if _, err := n.cl.Pause(ctx, id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := n.cl.Screenshot(ctx, id); !isCode(err, api.CodeConflict) {
		t.Errorf("screenshot while paused: %v, want conflict", err)
	}
	if _, err := n.cl.Resume(ctx, id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	n.stop(false)
	n.start()
	if r := n.sh(t, id, "cat /tmp/typed"); r.Stdout != "hi\n" {
		t.Errorf("after restart: %+v", r)
	}
	if _, err := n.cl.Screenshot(ctx, id); err != nil {
		t.Errorf("screenshot after restart: %v", err)
	}

	if err := n.cl.Delete(ctx, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// The VM's teardown ends in the background after Delete answered.
	testwait.Until(30*time.Second, func() bool {
		ents, _ := os.ReadDir(vms)
		return len(qemuOf(t, n.dataDir))+len(ents) == 0
	})
	if p := qemuOf(t, n.dataDir); len(p) != 0 {
		t.Errorf("QEMU processes left after delete: %v", p)
	}
	if ents, _ := os.ReadDir(vms); len(ents) != 0 {
		t.Errorf("VM directories left after delete: %v", ents)
	}
}
