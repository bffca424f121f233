package agenttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// BusyboxRoot is the root file system of the busybox image `make setup`
// builds: a static busybox with one symlink per applet.
const BusyboxRoot = "/var/lib/dsec/images/busybox/rootfs"

// NewRootedNode is NewNode with the mock driver in rooted mode (processes
// chrooted into their sandbox with the credentials they ask for; needs root),
// keeping the network policies it is given (mock.Config.Egress), and two images over the busybox root: "busybox" as it is, and "debian" (the
// default) which adds /bin/bash (busybox's shell under that name, with BASH
// set as bash sets it), the account "user" (uid 1000, home /home/user) and
// /etc/hostname. Tests that check what a program in a sandbox sees (its user,
// home, working directory, the owners of files) run against it.
func NewRootedNode(t testing.TB) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("agenttest.NewRootedNode needs root (the mock's rooted mode chroots)")
	}
	if _, err := os.Stat(filepath.Join(BusyboxRoot, "bin", "busybox")); err != nil {
		t.Fatalf("the busybox image is missing (make setup builds it): %v", err)
	}
	store := t.TempDir()
	write := func(rel, data string, mode os.FileMode) {
		p := filepath.Join(store, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(name string, extra ...string) string {
		m := `{"version":2,"name":"` + name + `","layers":[{"role":"base","dir":"` + BusyboxRoot + `"}`
		for _, d := range extra {
			m += `,{"role":"workspace","dir":"` + d + `"}`
		}
		return m + `]}`
	}
	write("busybox/"+image.ManifestFile, manifest("busybox"), 0o644)
	write("debian/"+image.ManifestFile, manifest("debian", "shell"), 0o644)
	write("judge/"+image.ManifestFile, manifest("judge", "../debian/shell"), 0o644)
	write("debian/shell/bin/bash", "#!/bin/sh\nBASH=/bin/bash exec /bin/sh \"$@\"\n", 0o755)
	write("debian/shell/etc/hostname", "sandbox\n", 0o644)
	if err := os.MkdirAll(filepath.Join(store, "debian/shell/home/user"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := &Node{Recorder: &Recorder{}, roots: t.TempDir()}
	drv := MockWith(t, mock.Config{StateDir: n.roots, Pause: true, BackendName: api.BackendContainer, Chroot: true, Egress: true})
	n.Agent = New(t, Options{Driver: drv, Config: func(c *agent.Config) {
		c.Images = &image.Store{Dir: store, Default: "debian"}
	}})
	n.Service = session.Chain(n.Agent, n.Recorder.Interceptor())
	return n
}
