package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dsec-dev/dsec/internal/hostfeat"
	"golang.org/x/sys/unix"
)

func TestParseDeviceRule(t *testing.T) {
	for _, c := range []struct {
		in   string
		want DeviceRule
	}{
		{"c 1:3 rwm", DeviceRule{'c', 1, 3, "rwm"}},
		{"c 136:* rw", DeviceRule{'c', 136, -1, "rw"}},
		{"b *:* m", DeviceRule{'b', -1, -1, "m"}},
		{"a", DeviceRule{'a', -1, -1, "rwm"}},
	} {
		got, err := ParseDeviceRule(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDeviceRule(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if c.in != "a" && got.String() != c.in {
			t.Errorf("String() = %q, want %q", got.String(), c.in)
		}
	}
	for _, bad := range []string{"", "c", "x 1:3 rwm", "c 1:3", "c 1-3 rwm", "c 1:3 rwx", "c 1:3 rr",
		"c -1:3 r", "c 1:99999999999 r", "c 1:3 ", "cc 1:3 r"} {
		if r, err := ParseDeviceRule(bad); err == nil {
			t.Errorf("ParseDeviceRule(%q) = %+v, want an error", bad, r)
		}
	}
}

func FuzzParseDeviceRule(f *testing.F) {
	for _, s := range []string{"c 1:3 rwm", "b *:* m", "a", "c 136:* rw"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseDeviceRule(s)
		if err != nil {
			return
		}
		if r.validate() != nil {
			t.Fatalf("parsed an invalid rule %+v from %q", r, s)
		}
		r2, err := ParseDeviceRule(r.String())
		if err != nil || r2 != r {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, r, r.String(), r2, err)
		}
	})
}

// testPolicy allows /dev/null and /dev/zero only.
func testPolicy() DevicePolicy {
	return DevicePolicy{Restrict: true, Allow: []DeviceRule{{'c', 1, 3, "rwm"}, {'c', 1, 5, "rw"}}}
}

// deviceCheck runs a shell in g (started stopped on a read, then added)
// that opens nodes made for /dev/null, /dev/zero and /dev/full, mknods /dev/zero again, and reports each exit status.
func deviceCheck(t *testing.T, g *Group, attr *syscall.SysProcAttr, add bool) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []struct {
		name     string
		mode     uint32
		maj, min uint32
	}{{"null", unix.S_IFCHR, 1, 3}, {"zero", unix.S_IFCHR, 1, 5}, {"full", unix.S_IFCHR, 1, 7}} {
		if err := unix.Mknod(filepath.Join(dir, n.name), n.mode|0o666, int(unix.Mkdev(n.maj, n.min))); err != nil {
			t.Fatal(err)
		}
	}
	script := `read x
for n in null zero full; do head -c1 $0/$n </dev/null >/dev/null 2>&1; printf "%s=%s " $n $?; done
mknod $0/zero2 c 1 5 2>/dev/null; printf "mknod=%s" $?`
	cmd := exec.Command("/bin/sh", "-c", script, dir)
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if add {
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
	}
	stdin.Write([]byte("\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return out.String()
}

// The shell's own redirections use /dev/null, so it must stay allowed;
// full (not in the policy) and mknod tell the policies apart.
const (
	wantRestricted   = "null=0 zero=0 full=1 mknod=1"
	wantUnrestricted = "null=0 zero=0 full=0 mknod=0"
)

func TestHostV1DevicePolicy(t *testing.T) {
	h := hostHierarchy(t)
	hostfeat.Need(t, hostfeat.CgroupDevices)
	open := createHost(t, h, "open", Limits{})
	if got := deviceCheck(t, open, nil, true); got != wantUnrestricted {
		t.Fatalf("unrestricted group: %s, want %s", got, wantUnrestricted)
	}
	g := createHost(t, h, "restricted", Limits{Devices: testPolicy()})
	b, err := os.ReadFile(filepath.Join(g.devDir, "devices.list"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "c 1:3 rwm\nc 1:5 rw" {
		t.Fatalf("devices.list = %q", got)
	}
	if got := deviceCheck(t, g, nil, true); got != wantRestricted {
		t.Fatalf("restricted group: %s, want %s", got, wantRestricted)
	}
	// a second group with the policy shares the devices cgroup
	g2 := createHost(t, h, "restricted2", Limits{Devices: testPolicy()})
	if g2.devDir != g.devDir {
		t.Fatalf("devices cgroups %s and %s, want one shared", g.devDir, g2.devDir)
	}
	if got := deviceCheck(t, g2, nil, true); got != wantRestricted {
		t.Fatalf("second restricted group: %s, want %s", got, wantRestricted)
	}
}

// TestHostV2DevicePolicy runs the BPF device program on the hybrid host's
// unified mount (no controllers there, but cgroup BPF attaches to any
// cgroup2 directory), starting the shell inside with CLONE_INTO_CGROUP.
func TestHostV2DevicePolicy(t *testing.T) {
	h := hostV2Hierarchy(t)
	t.Cleanup(func() { h.Close() })
	for _, c := range []struct {
		name string
		l    Limits
		want string
	}{{"open", Limits{}, wantUnrestricted}, {"restricted", Limits{Devices: testPolicy()}, wantRestricted}} {
		g := createHost(t, h, c.name, c.l)
		fd, err := g.Dir()
		if err != nil {
			t.Fatal(err)
		}
		got := deviceCheck(t, g, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}, false)
		unix.Close(fd)
		if got != c.want {
			t.Errorf("%s group: %s, want %s", c.name, got, c.want)
		}
	}
}
