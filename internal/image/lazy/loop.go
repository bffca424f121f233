package lazy

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// loopInfo describes the loop device under one erofs mount.
type loopInfo struct {
	dev         string // /dev/loopN
	directIO    bool   // the kernel accepted LO_FLAGS_DIRECT_IO
	readAheadKB int    // the device's readahead
}

// mountErofs mounts the erofs image in the FUSE blob file src read-only at dir.
//
// With fileBacked, erofs reads the FUSE file itself. Linux 6.18 refuses that
// ("file-backed mounts cannot be applied to stacked fses", ENOTBLK) when the FUSE
// connection negotiated passthrough, which sets the FUSE superblock's stacking
// depth; layerd disables passthrough, so it works. It is the default: no loop
// device per layer (a node-wide resource), and on the bench task it reached the
// first output sooner (0.54 vs 0.68 s) while fetching 5.7-5.8% of the Debian base
// against 5.0% through the loop device below (the FUSE page cache and its
// readahead sit in the path).
//
// Otherwise the image goes through a loop device attached with LOOP_CONFIGURE:
//   - autoclear: the device detaches itself when the mount goes away (or, if the
//     mount fails, when this function closes its descriptor), so nothing is left;
//   - direct I/O (unless buffered): the loop driver reads the FUSE file with
//     O_DIRECT, so the FUSE file keeps no second page cache copy of the blob and
//     adds no readahead of its own: a FUSE read is exactly a loop request;
//   - readahead readAheadKB (the device's, which erofs also uses for file data):
//     every extra KiB read ahead on a cold node is fetched from the blob store.
//
// Reads go erofs → loop → FUSE file → chunks fetched on demand.
func mountErofs(src, dir string, fileBacked, buffered bool, readAheadKB int) (loopInfo, error) {
	var li loopInfo
	if fileBacked {
		// erofs reads the FUSE file itself (possible because layerd's FUSE mount
		// does not negotiate passthrough, see NewDaemon).
		err := unix.Mount(src, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "")
		if err == nil || !errors.Is(err, unix.ENOTBLK) {
			if err != nil {
				err = fmt.Errorf("mount -t erofs %s %s: %w", src, dir, err)
			}
			return li, err
		}
	}
	bf, err := os.OpenFile(src, os.O_RDONLY, 0)
	if err != nil {
		return li, fmt.Errorf("open blob file: %w", err)
	}
	defer bf.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return li, fmt.Errorf("loop control: %w", err)
	}
	defer ctl.Close()
	flags := uint32(unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR)
	if !buffered {
		flags |= unix.LO_FLAGS_DIRECT_IO
	}
	var lf *os.File
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return li, fmt.Errorf("get free loop device: %w", err)
		}
		li.dev = "/dev/loop" + strconv.Itoa(n)
		f, err := openLoop(li.dev)
		if err != nil {
			return li, err
		}
		cfg := unix.LoopConfig{Fd: uint32(bf.Fd()), Size: 4096}
		cfg.Info.Flags = flags
		copy(cfg.Info.File_name[:], src)
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if err == nil {
			lf = f
			break
		}
		f.Close()
		// EBUSY: another process took the free device first.
		if !errors.Is(err, unix.EBUSY) || attempt >= 20 {
			return li, fmt.Errorf("configure %s: %w", li.dev, err)
		}
	}
	defer lf.Close() // with autoclear, the last close after a failed mount detaches it
	if readAheadKB >= 0 {
		if err := unix.IoctlSetInt(int(lf.Fd()), unix.BLKRASET, readAheadKB*2); err != nil {
			return li, fmt.Errorf("set readahead of %s: %w", li.dev, err)
		}
	}
	sys := "/sys/block/" + strings.TrimPrefix(li.dev, "/dev/")
	li.directIO = readSysInt(sys+"/loop/dio") == 1
	li.readAheadKB = readSysInt(sys + "/queue/read_ahead_kb")
	if err := unix.Mount(li.dev, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return li, fmt.Errorf("mount -t erofs %s (loop on %s) %s: %w", li.dev, src, dir, err)
	}
	return li, nil
}

// openLoop opens a loop device node, waiting briefly for it to appear (a device
// LOOP_CTL_GET_FREE just added may not have its node yet).
func openLoop(dev string) (*os.File, error) {
	for i := 0; ; i++ {
		f, err := os.OpenFile(dev, os.O_RDONLY, 0)
		if err == nil {
			return f, nil
		}
		if !os.IsNotExist(err) || i >= 50 {
			return nil, fmt.Errorf("open %s: %w", dev, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readSysInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}
