package mock

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Rooted mode (Config.Chroot, needs root): a sandbox's processes run chrooted
// into its root directory with the UID, GID and groups they ask for, so paths
// in their arguments and their working directory are the sandbox's paths (a
// `chown` changes the sandbox's files, `pwd` prints the in-sandbox directory)
// and credentials are real. The root must then hold the programs it runs
// (e.g. a static busybox). There is still no isolation beyond the chroot:
// same namespaces, no limits.

// chrooted reports whether the driver runs processes chrooted.
func (d *Driver) chrooted() bool { return d.cfg.Chroot }

// root applies rooted mode to cmd, a process of spec in the box whose root
// directory is root: cmd.Dir becomes the in-sandbox directory, resolved after
// the chroot.
func root(cmd *exec.Cmd, root, cwd string, uid, gid int, groups []int) {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	cmd.SysProcAttr.Chroot = root
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: gs}
	cmd.Dir = filepath.Clean("/" + cwd)
}

// statIn stats an in-sandbox path c of a rooted box for lookPath. A symlink
// (busybox's applets are) is resolved once inside the root, absolute targets
// against the root; what that target names is then followed as the host does.
func statIn(root, c string) (os.FileInfo, error) {
	p := filepath.Join(root, c)
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return fi, err
	}
	link, err := os.Readlink(p)
	if err != nil {
		return nil, err
	}
	if filepath.IsAbs(link) {
		return os.Stat(filepath.Join(root, link))
	}
	return os.Stat(filepath.Join(filepath.Dir(p), link))
}
