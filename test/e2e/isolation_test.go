package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestIsolation(t *testing.T) {
	n := startNode(t)
	a := n.create(t, api.CreateSandboxRequest{})
	b := n.create(t, api.CreateSandboxRequest{})

	// A marker on the host and a marker in sandbox b must be invisible to a.
	marker, err := os.CreateTemp("/tmp", "dsec-host-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	defer os.Remove(marker.Name())
	if r := n.sh(t, b, "echo secret > /tmp/b-marker && sleep 1000 & echo started"); r.ExitCode != 0 {
		t.Fatalf("b: %+v", r)
	}

	t.Run("pid namespace shows only the sandbox's own processes", func(t *testing.T) {
		r := n.sh(t, a, `for p in /proc/[0-9]*; do cat $p/comm; done`)
		comms := strings.Fields(r.Stdout)
		if len(comms) == 0 || len(comms) > 4 {
			t.Fatalf("unexpected process list %q", r.Stdout)
		}
		for _, c := range comms {
			if c == "sleep" || c == "dsec" || c == "systemd" || c == "process_api" {
				t.Fatalf("foreign process %q visible in sandbox: %q", c, r.Stdout)
			}
		}
		if r := n.sh(t, a, "cat /proc/1/comm"); !strings.HasPrefix(r.Stdout, "dsec-init") {
			t.Fatalf("pid 1 is %q", r.Stdout)
		}
	})
	t.Run("host and neighbour files are invisible", func(t *testing.T) {
		r := n.sh(t, a, "ls "+marker.Name()+" /tmp/b-marker /work /root/go 2>&1; echo rc=$?")
		if !strings.Contains(r.Stdout, "rc=2") || strings.Contains(r.Stdout, "secret") {
			t.Fatalf("host or neighbour files visible: %q", r.Stdout)
		}
	})
	t.Run("privileged calls are refused", func(t *testing.T) {
		for _, c := range []string{
			"mount -t tmpfs none /mnt",
			"mount --bind / /mnt",
			"unshare -m true",
			"umount /proc",
			"echo 1 > /proc/sys/kernel/panic",
			"mknod /tmp/sda b 8 0 && head -c1 /tmp/sda",
			"chroot / true && python3 -c 'import ctypes; l=ctypes.CDLL(None); exit(0 if l.setns(0,0)==0 else 1)'",
		} {
			if r := n.sh(t, a, c); r.ExitCode == 0 {
				t.Errorf("%q succeeded inside the sandbox: %+v", c, r)
			}
		}
		r := n.sh(t, a, "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status")
		if !strings.Contains(r.Stdout, "NoNewPrivs:\t1") || !strings.Contains(r.Stdout, "Seccomp:\t2") {
			t.Fatalf("no_new_privs/seccomp not set: %q", r.Stdout)
		}
		if strings.Contains(r.Stdout, "000001ffffffffff") || strings.Contains(r.Stdout, "000003ffffffffff") {
			t.Fatalf("full capability set: %q", r.Stdout)
		}
	})
	t.Run("no network beyond loopback", func(t *testing.T) {
		r := n.sh(t, a, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
		if strings.TrimSpace(r.Stdout) != "lo" {
			t.Fatalf("interfaces: %q", r.Stdout)
		}
		r = n.sh(t, a, `python3 -c '
import socket
s=socket.socket(); s.settimeout(2)
try:
    s.connect(("1.1.1.1",80)); print("connected")
except OSError as e:
    print("refused", e.errno)
'`)
		if !strings.Contains(r.Stdout, "refused") {
			t.Fatalf("outside network reachable: %q", r.Stdout)
		}
		r = n.sh(t, a, `python3 -c '
import socket,threading
l=socket.socket(); l.bind(("127.0.0.1",0)); l.listen(1)
c=socket.create_connection(l.getsockname()); print("loopback ok")'`)
		if !strings.Contains(r.Stdout, "loopback ok") {
			t.Fatalf("loopback broken: %+v", r)
		}
	})
	t.Run("each sandbox has its own hostname", func(t *testing.T) {
		if r := n.sh(t, a, "hostname"); strings.TrimSpace(r.Stdout) != a {
			t.Fatalf("hostname %q, want %q", r.Stdout, a)
		}
	})
	_ = context.Background
}
