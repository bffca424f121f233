package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// qemuOf lists the QEMU processes whose command line names dir.
func qemuOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), "qemu-system") && strings.Contains(string(b), dir) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestMicroVM drives one microVM through the real server: bad input first
// (nothing left behind), then create, exec in the guest's own kernel, a
// terminal, files, the HTTP proxy into a guest port, pause and resume, a
// server restart that re-adopts the VM, and delete that leaves no process,
// disk or socket. One guest for all of it: a TCG boot takes seconds.
func TestMicroVM(t *testing.T) {
	if _, err := os.Stat("/var/lib/dsec/vm/vmlinux"); err != nil {
		t.Skip("no microVM guest kernel (run scripts/setup.sh)")
	}
	n := startNode(t)
	ctx := context.Background()
	// The first server on a host boot runs the KVM probe (up to 20 s).
	var info api.Info
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if info, err = n.cl.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if info.VM == nil || info.VM.Accel != "" || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(strings.Join(info.Backends, ","), "microvm") || info.VM == nil || info.VM.Accel == "" || info.VM.Reason == "" {
		t.Fatalf("info: backends %v, vm %+v; want microvm with its acceleration and reason", info.Backends, info.VM)
	}
	t.Logf("acceleration: %s (%s)", info.VM.Accel, info.VM.Reason)

	// Bad input: clear 4xx, nothing created.
	for _, req := range []api.CreateSandboxRequest{
		{Backend: "nonesuch", Image: "busybox"},
		{Backend: "microvm", Image: "busybox", MemoryBytes: 64 << 20},
	} {
		_, err := n.cl.Create(ctx, req)
		if ae, ok := api.AsError(err); !ok || ae.Code != api.CodeInvalidArgument {
			t.Errorf("create %+v: %v, want invalid_argument", req, err)
		}
	}
	if sbs, _ := n.cl.List(ctx); len(sbs) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", sbs)
	}
	vms := filepath.Join(n.dataDir, "microvm", "vms")
	if ents, _ := os.ReadDir(vms); len(ents) != 0 || len(qemuOf(t, n.dataDir)) != 0 {
		t.Errorf("refused creates left VM dirs %v or QEMU processes", ents)
	}

	t0 := time.Now()
	sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{Backend: "microvm", Image: "busybox", MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatalf("create microvm: %v", err)
	}
	t.Logf("create: %v", time.Since(t0))
	id := sb.ID
	if sb.Backend != "microvm" || sb.VM == nil || sb.VM.Accel != info.VM.Accel {
		t.Errorf("sandbox %+v: want backend microvm with vm.accel %s", sb, info.VM.Accel)
	}
	if r := n.sh(t, id, "uname -r; cat /proc/meminfo | head -1"); r.ExitCode != 0 || strings.TrimSpace(r.Stdout) == "" ||
		!strings.HasPrefix(r.Stdout, "6.1.") {
		t.Errorf("guest kernel: %+v, want Debian's 6.1 (the host runs its own)", r)
	}

	// The CLI, unchanged apart from the backend; dsec info shows the choice.
	if out, _, code := n.cli(t, "", "info"); code != 0 || !strings.Contains(out, `"accel": "`+info.VM.Accel+`"`) {
		t.Errorf("dsec info: exit %d, %s", code, out)
	}
	if out, errs, code := n.cli(t, "", "exec", id, "--", "sh", "-c", "echo via-cli; exit 3"); out != "via-cli\n" || code != 3 {
		t.Errorf("dsec exec: %q %q exit %d, want via-cli and 3", out, errs, code)
	}
	if out, _, code := n.cli(t, "", "create", "--backend", "microvm", "--image", "busybox", "--memory", "64m"); code == 0 {
		t.Errorf("dsec create --backend microvm --memory 64m succeeded: %q", out)
	}

	// Terminal.
	s, scr := n.ptyExec(t, id, api.ExecRequest{Shell: "tty; stty size", Cols: 100, Rows: 30})
	if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("tty: %+v %v; screen %q", res, err, scr.all())
	}
	scr.expect(t, `^/dev/pts/\d+\r\n30 100\r\n$`)

	// Files both ways.
	if _, err := n.cl.WriteFile(ctx, id, "/tmp/www/index.html", 0o644, strings.NewReader("hello from the guest\n")); err != nil {
		if err2 := n.cl.Mkdir(ctx, id, api.MkdirRequest{Path: "/tmp/www", Parents: true}); err2 != nil {
			t.Fatalf("mkdir: %v (write: %v)", err2, err)
		}
		if _, err := n.cl.WriteFile(ctx, id, "/tmp/www/index.html", 0o644, strings.NewReader("hello from the guest\n")); err != nil {
			t.Fatalf("write file: %v", err)
		}
	}
	if r := n.sh(t, id, "cat /tmp/www/index.html"); r.Stdout != "hello from the guest\n" {
		t.Errorf("exec sees %q", r.Stdout)
	}
	n.sh(t, id, "echo made-inside > /tmp/inside")
	rc, err := n.cl.ReadFile(ctx, id, "/tmp/inside")
	if err != nil {
		t.Fatalf("read file: %v", err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "made-inside\n" {
		t.Errorf("read %q", b)
	}

	// HTTP proxy into a guest port.
	if _, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/tmp/www"}}); err != nil {
		t.Fatalf("start httpd: %v", err)
	}
	get := func() (string, error) {
		req, _ := http.NewRequest("GET", "http://"+n.addr+"/v1/sandboxes/"+id+"/http/8080/index.html", nil)
		req.Header.Set("Authorization", "Bearer "+n.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", &httpStatus{resp.StatusCode, string(b)}
		}
		return string(b), nil
	}
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if body, err = get(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if body != "hello from the guest\n" {
		t.Errorf("proxy: %q, %v", body, err)
	}

	// The launch's snapshot, taken in the background after the first
	// create: a second sandbox of the same launch is restored from it (its
	// own host name and files), and is re-adopted by the restart below too.
	snaps := filepath.Join(n.dataDir, "microvm", "snapshots")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(snaps, "*.snap")); len(m) > 0 || time.Now().After(deadline) {
			break
		}
	}
	t1 := time.Now()
	sb2, err := n.cl.Create(ctx, api.CreateSandboxRequest{Backend: "microvm", Image: "busybox", MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatalf("create a second microvm: %v", err)
	}
	t.Logf("create from the snapshot: %v", time.Since(t1))
	if sb2.VM == nil || !strings.Contains(sb2.VM.Reason, "restored from a snapshot") {
		t.Errorf("second sandbox of the launch: vm %+v, want restored from a snapshot", sb2.VM)
	}
	if r := n.sh(t, sb2.ID, "hostname; cat /tmp/inside 2>/dev/null || echo no-file"); r.Stdout != sb2.ID+"\nno-file\n" {
		t.Errorf("restored sandbox: %+v, want its own host name and not the first one's files", r)
	}

	// Pause and resume.
	if p, err := n.cl.Pause(ctx, id); err != nil || p.State != api.StatePaused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if r, err := n.cl.Resume(ctx, id); err != nil || r.State != api.StateRunning {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if r := n.sh(t, id, "echo after-resume"); r.Stdout != "after-resume\n" {
		t.Errorf("after resume: %+v", r)
	}

	// A server restart (SIGKILL) re-adopts the VM: files, processes, proxy,
	// and a background process's output after the restart reaches its log.
	late, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Shell: "sleep 1; echo early; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo late; exit 7"})
	if err != nil {
		t.Fatalf("start background process: %v", err)
	}
	// "early" is written, and has reached the log, while the first server runs.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var b []byte
		rc, err := n.cl.ProcessLogs(ctx, id, late.ID, "stdout", 0)
		if err == nil {
			b, err = io.ReadAll(rc)
			rc.Close()
		}
		if string(b) == "early\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background stdout before the restart: %q, %v; want early within 30 s", b, err)
		}
	}
	n.stop(false)
	n.start()
	n.sh(t, id, "touch /tmp/go")
	if p, err := n.cl.WaitProcess(ctx, id, late.ID, 30*time.Second); err != nil || p.Result == nil || p.Result.ExitCode != 7 {
		t.Errorf("background process across the restart: %+v %v, want exit 7", p, err)
	}
	if rc, err := n.cl.ProcessLogs(ctx, id, late.ID, "stdout", 0); err != nil {
		t.Errorf("logs: %v", err)
	} else {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "early\nlate\n" {
			t.Errorf("background stdout across the restart: %q, want early and late", b)
		}
	}
	if r := n.sh(t, id, "cat /tmp/inside; pidof httpd >/dev/null && echo httpd-alive"); r.Stdout != "made-inside\nhttpd-alive\n" {
		t.Errorf("after restart: %+v", r)
	}
	if body, err := get(); body != "hello from the guest\n" {
		t.Errorf("proxy after restart: %q, %v", body, err)
	}

	if r := n.sh(t, sb2.ID, "hostname"); r.Stdout != sb2.ID+"\n" {
		t.Errorf("restored sandbox after the restart: %+v", r)
	}

	// Delete leaves nothing behind.
	for _, d := range []string{id, sb2.ID} {
		if err := n.cl.Delete(ctx, d); err != nil {
			t.Fatalf("delete: %v", err)
		}
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
		t.Errorf("VM state (disk, sockets) left after delete: %v", ents)
	}
}

type httpStatus struct {
	code int
	body string
}

func (e *httpStatus) Error() string { return http.StatusText(e.code) + ": " + e.body }
