package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/seccomp"
)

// Podman runs `podman run` as an optional peer: what a single-node user would
// otherwise run. It gets the same Work as the OCI runtimes: --rootfs DIR:O
// (podman's own overlay over the image directory), the same cgroup limits,
// dsec's seccomp profile (--security-opt seccomp=FILE), no network, and a
// private cgroup namespace. Its storage, run dir and containers.conf are a
// scratch directory of its own.
//
// Host quirks (this kind of machine): podman's default runtime crun refuses
// the hybrid cgroup layout, so it runs runc; its default rlimits for root
// (nofile and nproc at 1048576 and 32768 hard) need raising hard limits the
// host refuses, so containers.conf sets nofile 1024 and nproc 4096.
type Podman struct {
	path   string
	w      Work
	dir    string
	prefix string
	driver string
	Notes  []string
}

// FindPodman returns the podman peer, or an error saying why there is none.
func FindPodman(w Work) (*Podman, error) { return NewPodman(w, "") }

// NewPodman is FindPodman with podman's storage driver named ("overlay",
// "vfs"; "": podman's default).
func NewPodman(w Work, driver string) (*Podman, error) {
	p, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("peer: podman not installed: %w", err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("peer: podman needs runc here: %w", err)
	}
	sec, notes, err := SeccompFrom(seccomp.Default())
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dsec-peer-podman-")
	if err != nil {
		return nil, err
	}
	pm := &Podman{path: p, w: w, dir: dir, Notes: notes, driver: driver,
		prefix: fmt.Sprintf("dsec-peer-podman-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)}
	b, err := json.Marshal(sec)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "seccomp.json"), b, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "containers.conf"),
			[]byte("[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=4096:4096\"]\n"), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return pm, nil
}

func (p *Podman) run(ctx context.Context, args ...string) error {
	_, err := p.Run(ctx, args...)
	return err
}

// Run runs podman with args on this peer's storage and settings and returns
// its output.
func (p *Podman) Run(ctx context.Context, args ...string) (string, error) {
	full := []string{"--root", p.Root(), "--runroot", filepath.Join(p.dir, "run"),
		"--cgroup-manager", "cgroupfs", "--events-backend", "none", "--runtime", "runc"}
	if p.driver != "" {
		full = append(full, "--storage-driver", p.driver)
	}
	cmd := exec.CommandContext(ctx, p.path, append(full, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(p.dir, "containers.conf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Root is the directory of podman's image and container storage.
func (p *Podman) Root() string { return filepath.Join(p.dir, "root") }

// Driver is the storage driver named ("": podman's default).
func (p *Podman) Driver() string { return p.driver }

// CgroupParent is the cgroup parent (--cgroup-parent) under which Close
// finds and removes what podman leaves (conmon's cgroups).
func (p *Podman) CgroupParent() string { return "/" + p.prefix }

// SeccompProfile is dsec's seccomp profile as podman's --security-opt file.
func (p *Podman) SeccompProfile() string { return filepath.Join(p.dir, "seccomp.json") }

func (p *Podman) name(i int) string { return p.prefix + "-" + strconv.Itoa(i) }

// Describe lists the work one `podman run` does.
func (p *Podman) Describe() []string {
	return append([]string{
		fmt.Sprintf("podman run -d (runc, cgroupfs): --rootfs %s:O (podman's overlay), --memory %dm --cpus %.2g --pids-limit %d, dsec's seccomp profile, --network none, --cgroupns private, idle init (sleep infinity)",
			p.w.Rootfs, p.w.MemoryBytes>>20, p.w.CPU, p.w.PidsMax),
		"podman's own work besides: its container database, conmon per container",
	}, p.Notes...)
}

// Create runs container i.
func (p *Podman) Create(ctx context.Context, i int) error {
	return p.run(ctx, "run", "-d", "--name", p.name(i), "--cgroup-parent", p.CgroupParent(),
		"--memory", strconv.FormatInt(p.w.MemoryBytes, 10), "--cpus", strconv.FormatFloat(p.w.CPU, 'f', -1, 64),
		"--pids-limit", strconv.FormatInt(p.w.PidsMax, 10), "--network", "none", "--cgroupns", "private",
		"--security-opt", "seccomp="+filepath.Join(p.dir, "seccomp.json"),
		"--rootfs", p.w.Rootfs+":O", "sleep", "infinity")
}

// Delete removes container i at once.
func (p *Podman) Delete(ctx context.Context, i int) error {
	return p.run(ctx, "rm", "-f", "-t", "0", p.name(i))
}

// Close removes every container of this peer, its cgroups and its directory.
func (p *Podman) Close() error {
	ctx := context.Background()
	err := p.run(ctx, "rm", "-a", "-f", "-t", "0")
	// conmon gets a cgroup of its own under the parent.
	err = errors.Join(err, removeCgroups(p.prefix+"/conmon"), removeCgroups(p.prefix))
	// Storage mounts podman may still hold under its scratch dir (a mount
	// stacked on another shows only once the upper one is gone: again).
	var rerr error
	for range 3 {
		if mi, merr := os.ReadFile("/proc/self/mountinfo"); merr == nil {
			lines := strings.Split(string(mi), "\n")
			for k := len(lines) - 1; k >= 0; k-- { // the deepest first
				if f := strings.Fields(lines[k]); len(f) > 4 && strings.HasPrefix(f[4], p.dir+"/") {
					_ = unmountDetach(f[4])
				}
			}
		}
		if rerr = os.RemoveAll(p.dir); rerr == nil {
			break
		}
	}
	return errors.Join(err, rerr)
}
