package reclaim

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Zram is a compressed swap device dsec created (zram hot_add) and owns: it is
// swapped on at SetupZram and swapped off, reset and removed by Close. Swap
// devices dsec did not create are never touched.
type Zram struct {
	N     int    // /dev/zramN
	Node  string // the block device node dsec made for it (swapon path)
	Size  int64
	state string // ownership record
}

type zramOwnership struct {
	N    int    `json:"n"`
	Node string `json:"node"`
}

const zramControl = "/sys/class/zram-control"

// SetupZram creates a zram device of size bytes (loading the module if needed),
// writes a swap signature, and swaps it on at priority 100. nodeDir holds the
// device node and stateFile the ownership record; a device a crashed dsec left
// in stateFile is removed first.
func SetupZram(size int64, nodeDir, stateFile string) (*Zram, error) {
	if err := RemoveStaleZram(stateFile); err != nil {
		return nil, err
	}
	if _, err := os.Stat(zramControl); errors.Is(err, os.ErrNotExist) {
		if out, err := exec.Command("modprobe", "zram", "num_devices=0").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("zram: modprobe: %v: %s", err, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(zramControl, "hot_add"))
	if err != nil {
		return nil, fmt.Errorf("zram: hot_add: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("zram: hot_add answered %q", b)
	}
	z := &Zram{N: n, Size: size, Node: filepath.Join(nodeDir, fmt.Sprintf("zram%d", n)), state: stateFile}
	rec, _ := json.Marshal(zramOwnership{N: n, Node: z.Node})
	if err := os.WriteFile(stateFile, rec, 0o600); err != nil {
		_ = z.remove()
		return nil, fmt.Errorf("zram: record ownership: %w", err)
	}
	if err := z.setup(); err != nil {
		_ = z.Close()
		return nil, err
	}
	return z, nil
}

func (z *Zram) sys(f string) string { return fmt.Sprintf("/sys/block/zram%d/%s", z.N, f) }

func (z *Zram) setup() error {
	if err := writeString(z.sys("disksize"), strconv.FormatInt(z.Size, 10)); err != nil {
		return fmt.Errorf("zram: disksize: %w", err)
	}
	devS, err := os.ReadFile(z.sys("dev"))
	if err != nil {
		return fmt.Errorf("zram: %w", err)
	}
	maj, min, _ := strings.Cut(strings.TrimSpace(string(devS)), ":")
	ma, _ := strconv.Atoi(maj)
	mi, _ := strconv.Atoi(min)
	if err := os.MkdirAll(filepath.Dir(z.Node), 0o700); err != nil {
		return fmt.Errorf("zram: %w", err)
	}
	_ = os.Remove(z.Node)
	if err := unix.Mknod(z.Node, unix.S_IFBLK|0o600, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil {
		return fmt.Errorf("zram: mknod %s: %w", z.Node, err)
	}
	if err := writeSwapHeader(z.Node, z.Size); err != nil {
		return err
	}
	if err := swapon(z.Node, 100); err != nil {
		return fmt.Errorf("zram: swapon %s: %w", z.Node, err)
	}
	return nil
}

// writeSwapHeader writes a version-1 swap signature ("SWAPSPACE2") as mkswap does.
func writeSwapHeader(path string, size int64) error {
	ps := int64(os.Getpagesize())
	hdr := make([]byte, ps)
	binary.LittleEndian.PutUint32(hdr[1024:], 1)                 // version
	binary.LittleEndian.PutUint32(hdr[1028:], uint32(size/ps-1)) // last_page
	copy(hdr[ps-10:], "SWAPSPACE2")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("zram: %w", err)
	}
	_, err = f.WriteAt(hdr, 0)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zram: write swap header: %w", err)
	}
	return nil
}

func swapon(path string, prio int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	const swapFlagPrefer = 0x8000
	_, _, e := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), uintptr(swapFlagPrefer|prio), 0)
	if e != 0 {
		return e
	}
	return nil
}

func swapoff(path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(p)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// Stats reports the device's original (uncompressed) data size and the memory
// its compressed pages use (mm_stat fields 1 and 3).
func (z *Zram) Stats() (orig, used int64, err error) {
	b, err := os.ReadFile(z.sys("mm_stat"))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("zram: mm_stat %q", b)
	}
	orig, _ = strconv.ParseInt(f[0], 10, 64)
	used, _ = strconv.ParseInt(f[2], 10, 64)
	return orig, used, nil
}

// Close swaps the device off (its pages come back into RAM), resets and
// removes it, and drops the ownership record.
func (z *Zram) Close() error {
	var errs []error
	if err := swapoff(z.Node); err != nil && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("zram: swapoff %s: %w", z.Node, err))
	}
	if err := z.remove(); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(z.Node)
	if len(errs) == 0 {
		_ = os.Remove(z.state)
	}
	return errors.Join(errs...)
}

func (z *Zram) remove() error {
	if err := writeString(z.sys("reset"), "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("zram: reset zram%d: %w", z.N, err)
	}
	if err := writeString(filepath.Join(zramControl, "hot_remove"), strconv.Itoa(z.N)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("zram: hot_remove zram%d: %w", z.N, err)
	}
	return nil
}

// RemoveStaleZram removes the device a previous dsec recorded in stateFile and
// did not remove (it crashed); no record is fine. Only a device that is still
// swap on dsec's own node path is swapped off.
func RemoveStaleZram(stateFile string) error {
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("zram: %w", err)
	}
	var own zramOwnership
	if err := json.Unmarshal(b, &own); err != nil {
		return fmt.Errorf("zram: ownership record %s: %w", stateFile, err)
	}
	swaps, _ := os.ReadFile("/proc/swaps")
	for _, line := range strings.Split(string(swaps), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == own.Node {
			z := &Zram{N: own.N, Node: own.Node, state: stateFile}
			return z.Close()
		}
	}
	// Not swap on our node any more (e.g. after a reboot): the device number
	// may be someone else's now, so only the record goes.
	_ = os.Remove(own.Node)
	return os.Remove(stateFile)
}
