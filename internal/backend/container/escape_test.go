package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/escapeprobe"
	"github.com/dsec-dev/dsec/internal/image"
)

// This file is the driver-level escape-probe suite (see internal/escapeprobe):
// every probe fails against a default sandbox, succeeds against one with its
// defences turned off (Driver.weaken), and fails again with any single one of
// them turned back on.

// weakDriver is a driver whose sandboxes get the weakening their ID maps to.
type weakDriver struct {
	*Driver
	lower []string
	mu    sync.Mutex
	by    map[string]weakening
	n     int
	disk  int64 // writable layer bytes (0: 64 MiB)
}

// newWeakDriver starts a private driver (state, run dir and cgroup parent of
// its own, all removed at cleanup) and returns it with the probe binary in a
// lower layer above the debian image.
func newWeakDriver(t *testing.T) *weakDriver { return newWeakDriverNS(t, false) }

// newWeakDriverNS is newWeakDriver whose sandboxes run in user namespaces
// by default (userns true; the weakening userns turns it off).
func newWeakDriverNS(t *testing.T, userns bool) *weakDriver {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups, mounts)")
	}
	imgDir := os.Getenv("DSEC_IMAGES_DIR")
	if imgDir == "" {
		imgDir = "/var/lib/dsec/images"
	}
	img, err := (&image.Store{Dir: imgDir}).Resolve("debian")
	if err != nil {
		t.Skipf("image debian not available (run `make setup`): %v", err)
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-esc-")
	if err != nil {
		t.Fatal(err)
	}
	run, err := os.MkdirTemp("/run", "dsec-esc-")
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StateDir: state, RunDir: run, CgroupParent: "dsec-test-" + filepath.Base(state), UserNS: userns})
	if err != nil {
		t.Fatal(err)
	}
	w := &weakDriver{Driver: d, by: map[string]weakening{}}
	d.weaken = func(id string) weakening {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.by[id]
	}
	t.Cleanup(func() {
		d.Close()
		os.RemoveAll(state)
		os.RemoveAll(run)
	})
	w.lower = append([]string{probeLayer(t)}, img.Lower()...)
	return w
}

// probeLayer builds the static probe binary into a fresh directory laid out
// as a layer (/usr/local/bin/dsec-escape-probe).
func probeLayer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "usr/local/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// DSEC_ESCAPE_PROBE is a probe built beforehand (CGO_ENABLED=0 go build
	// ./internal/escapeprobe/cmd/dsec-escape-probe), for hosts without Go
	// (the cgroup v2 guest of make test-cgv2).
	if pre := os.Getenv("DSEC_ESCAPE_PROBE"); pre != "" {
		b, err := os.ReadFile(pre)
		if err != nil {
			t.Fatalf("DSEC_ESCAPE_PROBE: %v", err)
		}
		if err := os.WriteFile(filepath.Join(bin, "dsec-escape-probe"), b, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "dsec-escape-probe"), "../../escapeprobe/cmd/dsec-escape-probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build probe: %v\n%s", err, out)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// start creates a sandbox with weakening wk, destroyed at cleanup.
func (w *weakDriver) start(t *testing.T, wk weakening) driver.Instance {
	t.Helper()
	return w.startSpec(t, wk, nil)
}

// startSpec is start with the spec changed by edit (if not nil).
func (w *weakDriver) startSpec(t *testing.T, wk weakening, edit func(*driver.Spec)) driver.Instance {
	t.Helper()
	w.mu.Lock()
	w.n++
	id := fmt.Sprintf("esc%d", w.n)
	w.by[id] = wk
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	disk := w.disk
	if disk == 0 {
		disk = 64 << 20
	}
	spec := driver.Spec{ID: id, Layers: driver.DirLayers(w.lower), Memory: 1 << 30, Disk: disk, PidsMax: 512}
	if edit != nil {
		edit(&spec)
	}
	inst, err := w.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start sandbox (%+v): %v", wk, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := inst.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return inst
}

// run runs args as root in the sandbox and returns stdout, stderr and the exit.
func run(t *testing.T, inst driver.Instance, args ...string) (string, string, driver.Exit) {
	t.Helper()
	return runAs(t, inst, 0, args...)
}

// runAs is run as user and group id.
func runAs(t *testing.T, inst driver.Instance, id int, args ...string) (string, string, driver.Exit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var bufs [2]bytes.Buffer
	p, err := inst.Exec(ctx, driver.ProcSpec{Args: args, UID: id, GID: id,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}}, driver.Stdio{Stdout: &bufs[0], Stderr: &bufs[1]})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	defer p.Close()
	ex, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %v: %v", args, err)
	}
	return bufs[0].String(), bufs[1].String(), ex
}

// probeEnv is what the probes need to know about this host.
func probeEnv(t *testing.T) escapeprobe.Env {
	t.Helper()
	maj, min := hostDisk(t)
	// WantCaps is written out, not initproto.DefaultCaps (the value under
	// test): Docker's default set without CAP_MKNOD and CAP_NET_RAW, pinned
	// name by name in internal/backend/initproto's TestDefaultsPinned.
	env := escapeprobe.Env{HostDisk: [2]uint32{maj, min}, WantCaps: 0xa00405fb}
	// the masked paths this host has and root can read here, outside
	// (kmsg blocks a reader). Left out too: files whose open needs a
	// capability no sandbox has (kcore CAP_SYS_RAWIO, mtrr CAP_SYS_ADMIN),
	// which with the mask off still refuse, so their probe could not fail;
	// Debian's 6.1 kernel has both, this CI host's kernel neither.
	capGated := []string{"/proc/kmsg", "/proc/kcore", "/proc/mtrr"}
	var cands []string
	for _, p := range initproto.DefaultMasked() {
		if !slices.Contains(capGated, p) {
			cands = append(cands, p)
		}
	}
	for _, r := range escapeprobe.Run(escapeprobe.Env{MaskedPaths: cands}, []string{"read-masked"}) {
		if r.Escaped {
			env.MaskedPaths = append(env.MaskedPaths, strings.TrimPrefix(r.Name, "read-masked:"))
		}
	}
	if !slices.Contains(env.MaskedPaths, "/proc/kpagecgroup") {
		t.Logf("note: /proc/kpagecgroup not readable on this host")
	}
	return env
}

// hostDisk is the host's root block device, derived from mountinfo, when
// host root can read it; some hosts (this CI VM) refuse that even to their
// own root, and then a loop device over a test file stands in for it (a
// block device the sandbox has no business opening either).
func hostDisk(t *testing.T) (uint32, uint32) {
	t.Helper()
	maj, min, path, err := escapeprobe.HostRootDisk()
	if err == nil {
		node := filepath.Join(t.TempDir(), "disk")
		if err = unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))); err == nil {
			var f *os.File
			if f, err = os.Open(node); err == nil {
				_, err = f.Read(make([]byte, 512))
				f.Close()
			}
		}
		if err == nil {
			t.Logf("host root disk %d:%d (%s)", maj, min, path)
			return maj, min
		}
		t.Logf("host root disk %d:%d (%s) unreadable even to host root (%v); a loop device stands in", maj, min, path, err)
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, bytes.Repeat([]byte("dsec-probe-disk\n"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", img).Output()
	if err != nil {
		t.Skipf("no loop device: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("loop device %s (%d:%d) as the host disk", dev, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	return unix.Major(st.Rdev), unix.Minor(st.Rdev)
}

// runProbes runs the whole suite in inst and returns the results by name.
func runProbes(t *testing.T, inst driver.Instance, env escapeprobe.Env) map[string]escapeprobe.Result {
	t.Helper()
	return runProbesAs(t, inst, env, 0)
}

// runProbesAs runs the suite as user and group id, through the words of
// via first (e.g. sudo) if any.
func runProbesAs(t *testing.T, inst driver.Instance, env escapeprobe.Env, id int, via ...string) map[string]escapeprobe.Result {
	t.Helper()
	stdout, stderr, ex := runAs(t, inst, id, append(via, "dsec-escape-probe",
		"-disk", fmt.Sprintf("%d:%d", env.HostDisk[0], env.HostDisk[1]),
		"-caps", fmt.Sprintf("%x", env.WantCaps), "-masked", strings.Join(env.MaskedPaths, ","))...)
	if ex.Code != 0 {
		t.Fatalf("probe exit %+v: %s", ex, stderr)
	}
	var rs []escapeprobe.Result
	if err := json.Unmarshal([]byte(stdout), &rs); err != nil {
		t.Fatalf("probe output %q: %v", stdout, err)
	}
	m := map[string]escapeprobe.Result{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// weaken turns the named defences off.
func weaken(ds ...escapeprobe.Defence) weakening {
	var w weakening
	for _, d := range ds {
		switch d {
		case escapeprobe.DevCgroup:
			w.devCgroup = true
		case escapeprobe.NoDev:
			w.nodev = true
		case escapeprobe.NoMknod:
			w.mknod = true
		case escapeprobe.Masks:
			w.masks = true
		case escapeprobe.ReadOnly:
			w.readOnly = true
		case escapeprobe.NoNetRaw:
			w.netRaw = true
		case escapeprobe.Seccomp:
			w.seccomp = true
		case escapeprobe.Caps:
			w.caps = true
		case escapeprobe.Dumpable:
			w.dumpable = true
		case escapeprobe.CgroupNS:
			w.cgroupNS = true
		case escapeprobe.UserNS:
			w.userns = true
		default:
			panic("unknown defence " + d)
		}
	}
	return w
}

// TestEscapeProbes runs the suite against sandboxes without (the node's
// default) and with user namespaces.
func TestEscapeProbes(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the seccomp profile is x86_64 only")
	}
	for _, userns := range []bool{false, true} {
		t.Run(fmt.Sprintf("userns=%v", userns), func(t *testing.T) { testEscapeProbes(t, userns) })
	}
}

func testEscapeProbes(t *testing.T, userns bool) {
	w := newWeakDriverNS(t, userns)
	env := probeEnv(t)

	// One sandbox per distinct weakening; the whole suite runs once in each.
	results := map[weakening]map[string]escapeprobe.Result{}
	resultsFor := func(t *testing.T, ds []escapeprobe.Defence) map[string]escapeprobe.Result {
		wk := weaken(ds...)
		if r, ok := results[wk]; ok {
			return r
		}
		r := runProbes(t, w.start(t, wk), env)
		results[wk] = r
		return r
	}
	names := func(p escapeprobe.Probe) []string {
		if p.Name != "read-masked" {
			return []string{p.Name}
		}
		var ns []string
		for _, m := range env.MaskedPaths {
			ns = append(ns, "read-masked:"+m)
		}
		return ns
	}
	for _, p := range escapeprobe.Probes() {
		if !userns {
			var ok bool
			if p, ok = p.Without(escapeprobe.UserNS); !ok {
				continue
			}
		}
		t.Run(p.Name, func(t *testing.T) {
			for _, name := range names(p) {
				if r := resultsFor(t, nil)[name]; r.Escaped || r.Name == "" {
					t.Errorf("%s: escaped from a default sandbox (or did not run): %+v", name, r)
				} else {
					t.Logf("%s: default sandbox holds: %s", name, r.Detail)
				}
				all := append(slices.Clone(p.Defences), p.Also...)
				if r := resultsFor(t, all)[name]; !r.Escaped {
					t.Errorf("%s: did not get through with %v off, so it cannot fail: %+v", name, all, r)
				}
				if len(p.Defences) < 2 {
					continue
				}
				for _, on := range p.Defences {
					off := slices.Clone(p.Also)
					for _, d := range p.Defences {
						if d != on {
							off = append(off, d)
						}
					}
					if r := resultsFor(t, off)[name]; r.Escaped {
						t.Errorf("%s: %s alone does not stop it: %+v", name, on, r)
					}
				}
			}
		})
	}
	var ks []string
	for wk := range results {
		ks = append(ks, fmt.Sprintf("%+v", wk))
	}
	sort.Strings(ks)
	t.Logf("%d sandbox configurations:\n%s", len(ks), strings.Join(ks, "\n"))
}

// TestSeccompAllowList: in a real sandbox, a call the allow list does not
// name and a number no kernel assigns fail with EPERM, clone3 with ENOSYS
// (so libc falls back to clone), socket refuses AF_VSOCK and AF_ALG, and
// ordinary calls work. A sandbox without the filter answers differently, so
// the check can fail.
func TestSeccompAllowList(t *testing.T) {
	w := newWeakDriverNS(t, false)
	errnos := func(wk weakening) map[string]string {
		stdout, stderr, ex := run(t, w.start(t, wk), "dsec-escape-probe", "-syscalls")
		if ex.Code != 0 {
			t.Fatalf("probe exit %+v: %s", ex, stderr)
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Fatalf("probe output %q: %v", stdout, err)
		}
		return m
	}
	want := map[string]string{
		"get_mempolicy": "EPERM", "syscall_1000": "EPERM", "clone3": "ENOSYS",
		"socket_af_vsock": "EPERM", "socket_af_alg": "EPERM", "socket_af_unix": "ok", "socket_af_inet": "ok",
		"getpid": "ok", "personality_query": "ok", "personality_rie": "EPERM",
		"unshare_uts": "EPERM", "sethostname": "EPERM",
	}
	got := errnos(weakening{})
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("probe answered %v, want the %d calls of %v", got, len(want), want)
	}
	// without the filter: the call works, the number is unknown to the
	// kernel, clone3 rejects its null argument, the personality is set
	weak := errnos(weakening{seccomp: true})
	for k, v := range map[string]string{"get_mempolicy": "ok", "syscall_1000": "ENOSYS", "clone3": "EINVAL", "personality_rie": "ok"} {
		if weak[k] != v {
			t.Errorf("without seccomp, %s: %q, want %q", k, weak[k], v)
		}
	}
}
