package container

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// devptsMagic is DEVPTS_SUPER_MAGIC.
const devptsMagic = 0x1cd1

// openPTY allocates a terminal in the sandbox's own devpts instance: the master
// comes from the sandbox's /dev/pts/ptmx (resolved inside its root, no symlinks
// followed, checked to be a devpts ptmx), the slave from the master itself
// (TIOCGPTPEER), so `tty` inside prints /dev/pts/N and the host's devpts is never
// involved.
func (in *instance) openPTY(cols, rows int) (master, slave *os.File, err error) {
	root, err := in.root()
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	fd, err := unix.Openat2(int(root.Fd()), "dev/pts/ptmx", &unix.OpenHow{
		Flags:   unix.O_RDWR | unix.O_NOCTTY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, nil, errdefs.Internal(err, "open the sandbox's /dev/pts/ptmx")
	}
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Fstatfs(fd, &sfs); err != nil || sfs.Type != devptsMagic {
		unix.Close(fd)
		return nil, nil, errdefs.Internal(fmt.Errorf("type %#x, %v", sfs.Type, err), "the sandbox's /dev/pts is not a devpts")
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 5 || unix.Minor(st.Rdev) != 2 {
		unix.Close(fd)
		return nil, nil, errdefs.Internal(err, "the sandbox's /dev/pts/ptmx is not a ptmx")
	}
	return procio.NewPTY(fd, cols, rows)
}

// execTTY starts p on a new terminal: the slave is its stdio and controlling
// terminal; the caller's streams are pumped to and from the master. A tagged
// process's master is also kept by the init, so the terminal outlives this
// agent and a later Attach picks it up again.
func (in *instance) execTTY(ctx context.Context, p driver.ProcSpec, stdio driver.Stdio) (driver.Proc, error) {
	if err := procio.CheckSize(p.TTY.Cols, p.TTY.Rows); err != nil {
		return nil, err
	}
	master, slave, err := in.openPTY(p.TTY.Cols, p.TTY.Rows)
	if err != nil {
		return nil, err
	}
	var keep *os.File
	if p.Tag != "" {
		keep = master
	}
	pr, err := in.exec(ctx, p, [3]*os.File{slave, slave, slave}, keep)
	slave.Close()
	if err != nil {
		master.Close()
		return nil, err
	}
	cp, ok := pr.(*proc)
	if !ok { // a start failure: nothing runs on the terminal
		master.Close()
		return pr, nil
	}
	cp.term = procio.NewTerm(master)
	cp.term.Start(stdio.Stdin, stdio.Stdout)
	return cp, nil
}
