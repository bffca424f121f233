package microvm

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsec-dev/dsec/internal/backend/vm/agentbin"
)

// cpio writes a newc ("070701") archive, the initramfs format.
type cpio struct {
	b   bytes.Buffer
	ino int
}

func (c *cpio) add(name string, mode uint32, data []byte) {
	c.ino++
	fmt.Fprintf(&c.b, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.b.WriteString(name)
	c.b.WriteByte(0)
	c.pad()
	c.b.Write(data)
	c.pad()
}

func (c *cpio) pad() {
	for c.b.Len()%4 != 0 {
		c.b.WriteByte(0)
	}
}

// guestModules are the modules the guest loads at boot, dependencies first
// (all are =m in Debian's kernel; scripts/setup.sh copies them into
// VMDir/modules).
// virtio_console comes first of the devices: its port's handshake with
// QEMU then runs while the rest load.
var guestModules = []string{"crc32c_generic", "libcrc32c", "virtio_ring", "virtio", "virtio_mmio",
	"virtio_console", "virtio_blk", "erofs", "overlay"}

// laterModules are loaded once the agent serves (after the first exec or
// the first idle moment, at most 2 s later): virtio_balloon's free page
// reporting matters to an idle VM, not to its boot (7–25 ms of it on TCG).
var laterModules = []string{"virtio_balloon"}

// buildInitramfs returns the guest's initramfs: /init (the agent) and the
// kernel modules from modDir in load order, then the extra ones (paths).
func buildInitramfs(modDir string, extra []string) ([]byte, error) {
	var c cpio
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules", "rw", "newroot", "layers"} {
		c.add(d, 0o40755, nil)
	}
	c.add("init", 0o100755, agentbin.Binary())
	for _, list := range []struct {
		name    string
		modules []string
	}{{"order", append(slices.Clone(guestModules), extra...)}, {"later", laterModules}} {
		for i, m := range list.modules {
			p := filepath.Join(modDir, m+".ko")
			if strings.HasSuffix(m, ".ko") {
				p, m = m, strings.TrimSuffix(filepath.Base(m), ".ko")
				list.modules[i] = m
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("microvm: guest module (run scripts/setup.sh): %w", err)
			}
			c.add("lib/modules/"+m+".ko", 0o100644, hideBTF(stripSignature(b)))
		}
		c.add("lib/modules/"+list.name, 0o100644, []byte(strings.Join(list.modules, "\n")+"\n"))
	}
	c.add("TRAILER!!!", 0, nil)
	return c.b.Bytes(), nil
}

// writeInitramfs writes the initramfs under stateDir, named by its content
// hash so running VMs keep theirs while a new agent binary boots new ones.
func writeInitramfs(stateDir, modDir string, extra []string) (string, error) {
	img, err := buildInitramfs(modDir, extra)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(img)
	p := filepath.Join(stateDir, "initramfs-"+hex.EncodeToString(sum[:8])+".cpio")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	tmp := fmt.Sprintf("%s.tmp%d", p, os.Getpid())
	if err := os.WriteFile(tmp, img, 0o644); err != nil {
		return "", fmt.Errorf("microvm: write initramfs: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("microvm: write initramfs: %w", err)
	}
	return p, nil
}

// sigMagic ends a signed kernel module (scripts/sign-file).
const sigMagic = "~Module signature appended~\n"

// stripSignature drops a module's appended signature: the guest kernel does
// not enforce signatures (CONFIG_MODULE_SIG_FORCE is off) and checking them
// (RSA under TCG) was 4.5 s of a 10 s boot. The modules come from the
// Debian package setup unpacked, and the initramfs is the driver's own.
func stripSignature(b []byte) []byte {
	if !bytes.HasSuffix(b, []byte(sigMagic)) {
		return b
	}
	// struct module_signature (12 bytes, sig_len big-endian at 8) precedes
	// the magic; the signature precedes it.
	end := len(b) - len(sigMagic)
	if end < 12 {
		return b
	}
	info := b[end-12 : end]
	sigLen := int(info[8])<<24 | int(info[9])<<16 | int(info[10])<<8 | int(info[11])
	if sigLen < 0 || end-12-sigLen < 0 {
		return b
	}
	return b[:end-12-sigLen]
}

// hideBTF renames a module's .BTF section (its name offset points at the
// empty string), so the guest kernel does not parse and check the module's
// BTF type information at load (CONFIG_DEBUG_INFO_BTF_MODULES): that was
// 100–500 ms of jbd2, ext4 and virtio_console's load under TCG, for
// BPF tooling a sandbox guest never runs. Anything that is not a 64-bit
// little-endian ELF with such a section comes back unchanged.
func hideBTF(b []byte) []byte {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil || f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian || len(b) < 64 {
		return b
	}
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	if shentsize < 64 {
		return b
	}
	var out []byte
	for i, s := range f.Sections {
		if s.Name != ".BTF" {
			continue
		}
		h := shoff + uint64(i)*shentsize
		if h+4 > uint64(len(b)) || h < shoff {
			return b
		}
		if out == nil {
			out = bytes.Clone(b)
		}
		binary.LittleEndian.PutUint32(out[h:], 0)
	}
	if out == nil {
		return b
	}
	return out
}
