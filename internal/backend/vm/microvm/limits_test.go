package microvm

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestLimits: a guest below the minimum memory is invalid_argument before
// anything is made; vCPUs round up from the CPU limit.
func TestLimits(t *testing.T) {
	for _, mem := range []int64{0, 64 << 20, MinMemory - 1, MaxMemory + 1} {
		if _, _, _, err := (&Driver{}).limits(driver.Spec{Memory: mem, CPU: 1}); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("memory %d: %v, want invalid_argument", mem, err)
		}
	}
	if _, _, _, err := (&Driver{}).limits(driver.Spec{Memory: 256 << 20, CPU: 1, Disk: MaxDisk + 1}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("disk above MaxDisk: %v, want invalid_argument", err)
	}
	v, m, disk, err := (&Driver{}).limits(driver.Spec{Memory: 256 << 20, CPU: 0.5, Disk: 1})
	if err != nil || v != 1 || m != 256 || disk != MinDisk {
		t.Errorf("limits = %d vCPU, %d MiB, disk %d, %v", v, m, disk, err)
	}
}

// TestBadLayerKind: an unknown layer kind is invalid_argument.
func TestBadLayerKind(t *testing.T) {
	c := &layerCache{dir: t.TempDir()}
	if _, err := c.image(context.Background(), driver.Layer{Kind: "squashfs", Path: "/x"}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("squashfs layer: %v, want invalid_argument", err)
	}
	if _, err := c.image(context.Background(), driver.Layer{Kind: driver.LayerDir, Path: "/nonexistent/dsec"}); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("missing layer dir: %v, want not_found", err)
	}
}

// TestParseEnt reads the agent's LIST entries, names with ':' included.
func TestParseEnt(t *testing.T) {
	fi, ok := parseEnt("/d", "41471:7:1700000000.000000005:0:0:4:/tmpa:b")
	if !ok || fi.Name != "a:b" || fi.Link != "/tmp" || fi.Type != "symlink" || fi.Path != "/d/a:b" {
		t.Errorf("parseEnt = %+v, %v", fi, ok)
	}
	for _, bad := range []string{"", "1:2:3", "x:1:1.0:0:0:0:n", "1:1:1.0:0:0:99:n"} {
		if _, ok := parseEnt("/", bad); ok {
			t.Errorf("parseEnt(%q) accepted", bad)
		}
	}
}

func FuzzParseEnt(f *testing.F) {
	f.Add("33188:5:1.5:0:0:0:file")
	f.Fuzz(func(t *testing.T, e string) { parseEnt("/", e) })
}

// TestStripSignature: a signed module loses exactly its signature block.
func TestStripSignature(t *testing.T) {
	mod := []byte("\x7fELFmodule-body")
	sig := []byte("SIGNATURE")
	info := []byte{0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(sig))}
	signed := append(append(append(append([]byte{}, mod...), sig...), info...), sigMagic...)
	if got := stripSignature(signed); string(got) != string(mod) {
		t.Errorf("stripSignature = %q, want %q", got, mod)
	}
	if got := stripSignature(mod); string(got) != string(mod) {
		t.Errorf("unsigned module changed: %q", got)
	}
}

// TestHideBTF: a guest module keeps every section but .BTF, which the
// kernel's loader then no longer finds (it looks sections up by name).
func TestHideBTF(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(DefaultVMDir, "modules", "overlay.ko"))
	if err != nil {
		t.Fatalf("no guest module (run scripts/setup.sh): %v", err)
	}
	names := func(b []byte) []string {
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, s := range f.Sections {
			n = append(n, s.Name)
		}
		return n
	}
	before, after := names(b), names(hideBTF(b))
	if !slices.Contains(before, ".BTF") {
		t.Fatalf("overlay.ko has no .BTF section: %v", before)
	}
	if slices.Contains(after, ".BTF") || len(after) != len(before) {
		t.Errorf("after hideBTF: %v (before %v)", after, before)
	}
	for i := range before {
		if before[i] != after[i] && before[i] != ".BTF" {
			t.Errorf("section %d renamed %q -> %q", i, before[i], after[i])
		}
	}
	if got := hideBTF([]byte("\x7fELFnot-really")); string(got) != "\x7fELFnot-really" {
		t.Errorf("a non-ELF changed: %q", got)
	}
}

func FuzzHideBTF(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(DefaultVMDir, "modules", "crc16.ko")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if out := hideBTF(b); len(out) != len(b) {
			t.Fatalf("length changed %d -> %d", len(b), len(out))
		}
	})
}

// TestSwapHeader: the writable disk's header is the one mkswap writes
// (without a UUID), so the guest's swapon takes it.
func TestSwapHeader(t *testing.T) {
	mk, err := exec.LookPath("mkswap")
	if err != nil {
		t.Fatalf("mkswap (util-linux) missing: %v", err)
	}
	ours := filepath.Join(t.TempDir(), "ours")
	if err := makeDisk(context.Background(), ours, 64<<20); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.WriteFile(theirs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(theirs, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mk, "-U", "clear", theirs).CombinedOutput(); err != nil {
		t.Fatalf("mkswap: %v: %s", err, out)
	}
	a, _ := os.ReadFile(ours)
	b, _ := os.ReadFile(theirs)
	if len(a) != 64<<20 || !bytes.Equal(a[:8192], b[:8192]) {
		t.Errorf("swap header differs from mkswap's (size %d):\nours   %x\nmkswap %x", len(a), a[1024:1040], b[1024:1040])
	}
}
