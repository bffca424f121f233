package container

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/escapeprobe"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestAllowSetuidSudo: in a sandbox created with AllowSetuid, user 1000's
// `sudo id -u` prints 0 (E2B's user has passwordless sudo), while a
// default sandbox refuses with sudo's own no_new_privs message. Root gained
// through sudo is sandbox root and nothing more: the whole escape-probe
// suite, run through sudo as user 1000, gets nowhere (seccomp-off sees the
// filter in place, no_new_privs off by request), and from the host the
// sudo'd process has exactly sandbox root's capability bounding set, the
// seccomp filter, and in a user namespace an unprivileged host uid.
func TestAllowSetuidSudo(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the seccomp profile is x86_64 only")
	}
	for _, userns := range []bool{false, true} {
		t.Run(fmt.Sprintf("userns=%v", userns), func(t *testing.T) { testAllowSetuidSudo(t, userns) })
	}
}

func testAllowSetuidSudo(t *testing.T, userns bool) {
	w := newWeakDriverNS(t, userns)
	env := probeEnv(t)

	def := w.start(t, weakening{})
	stdout, stderr, ex := runAs(t, def, 1000, "sudo", "-n", "id", "-u")
	if ex.Code == 0 || !strings.Contains(stderr, "no new privileges") {
		t.Errorf("sudo in a default sandbox: exit %+v, stdout %q, stderr %q; want a refusal naming no_new_privs", ex, stdout, stderr)
	}

	inst := w.startSpec(t, weakening{}, func(s *driver.Spec) { s.AllowSetuid = true })
	if stdout, stderr, ex := runAs(t, inst, 1000, "id", "-u"); ex.Code != 0 || stdout != "1000\n" {
		t.Fatalf("id -u as user 1000: exit %+v, %q %q", ex, stdout, stderr)
	}
	stdout, stderr, ex = runAs(t, inst, 1000, "sudo", "-n", "id", "-u")
	if ex.Code != 0 || stdout != "0\n" {
		t.Fatalf("sudo id -u as user 1000 with AllowSetuid: exit %+v, stdout %q, stderr %q; want 0", ex, stdout, stderr)
	}

	// Inside: every escape probe, as root gained through sudo, fails.
	rs := runProbesAs(t, inst, env, 1000, "sudo", "-n")
	for _, p := range escapeprobe.Probes() {
		if !userns {
			var ok bool
			if p, ok = p.Without(escapeprobe.UserNS); !ok {
				continue // gets through without a user namespace by design
			}
		}
		names := []string{p.Name}
		if p.Name == "read-masked" {
			names = names[:0]
			for _, m := range env.MaskedPaths {
				names = append(names, "read-masked:"+m)
			}
		}
		for _, name := range names {
			r, ok := rs[name]
			switch {
			case !ok:
				t.Errorf("%s: did not run", name)
			case name == "seccomp-off":
				// no_new_privs is off on purpose; the filter must hold
				if r.Detail != "Seccomp=2 NoNewPrivs=0" {
					t.Errorf("%s: %q, want the filter on and no_new_privs off", name, r.Detail)
				}
			case r.Escaped:
				t.Errorf("%s: escaped through sudo: %+v", name, r)
			}
		}
	}

	// Outside: the host's view of a process started through sudo.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"sudo", "-n", "sleep", "300"}, UID: 1000, GID: 1000,
		Env: []string{"PATH=/usr/bin:/bin"}}, driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer p.Signal(9)
	cg := inst.(*instance).Cgroup()
	var pid int
	testwait.For(t, 30*time.Second, "sleep started by sudo in the sandbox's cgroup", func() bool {
		procs, _ := cg.Procs()
		for _, q := range procs {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", q)); err == nil && string(b) == "sleep\n" {
				pid = q
				return true
			}
		}
		return false
	})
	st := hostStatus(t, pid)
	wantCaps := fmt.Sprintf("%016x", env.WantCaps)
	for k, want := range map[string]string{"CapEff": wantCaps, "CapPrm": wantCaps, "CapBnd": wantCaps,
		"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "Seccomp": "2", "NoNewPrivs": "0"} {
		if st[k] != want {
			t.Errorf("host view of the sudo'd process: %s=%q, want %q", k, st[k], want)
		}
	}
	uid := strings.Fields(st["Uid"])
	if len(uid) != 4 {
		t.Fatalf("Uid line %q", st["Uid"])
	}
	if !userns {
		if uid[1] != "0" {
			t.Errorf("without a user namespace sudo gives sandbox root, host uid 0 with the caps above; got euid %s", uid[1])
		}
		return
	}
	base, _ := inst.(driver.IDMapped).IDMap()
	for _, u := range uid {
		if n, err := strconv.ParseUint(u, 10, 32); err != nil || uint32(n) != base {
			t.Errorf("host uids %v: want all %d (sandbox root's unprivileged host uid)", uid, base)
			break
		}
	}
	self, err1 := os.Readlink("/proc/self/ns/user")
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err1 != nil || err2 != nil || self == theirs {
		t.Errorf("the sudo'd process's user namespace %q (%v), the host's %q (%v): want its own", theirs, err2, self, err1)
	}
	t.Logf("host view: uid %v, CapEff %s in its own user namespace, Seccomp %s", uid, st["CapEff"], st["Seccomp"])
}

// hostStatus reads /proc/PID/status on the host.
func hostStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}
