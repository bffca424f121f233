package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// guestProbes is run as root inside a guest. Each probe prints one line
// "PROBE <name> <got-through|blocked> <detail>":
//   - host-file: any block device holding the host's marker (a host file
//     shared with the VM);
//   - route-device: a virtio device that leads out of the VM (net 1, 9p 9,
//     vsock 19, virtio-fs 26);
//   - net-interface: any network interface but lo;
//   - host-listener: a TCP connection to the node's listener through the
//     addresses a guest would use for the host (QEMU's user-mode gateway,
//     the usual bridge gateways).
const guestProbes = `
m=$1; port=$2
found=""
for b in /sys/block/*; do
  n=${b##*/}; mm=$(cat $b/dev)
  mknod /tmp/probe-$n b ${mm%%:*} ${mm##*:} 2>/dev/null
  if head -c 67108864 /tmp/probe-$n 2>/dev/null | grep -q "$m"; then found="$found $n"; fi
done
if [ -n "$found" ]; then echo "PROBE host-file got-through$found"; else echo "PROBE host-file blocked"; fi
ids=$(cat /sys/bus/virtio/devices/*/device 2>/dev/null | tr '\n' ' ')
r=""
for id in $ids; do case $id in 0x0001|0x0009|0x0013|0x001a) r="$r $id";; esac; done
if [ -n "$r" ]; then echo "PROBE route-device got-through$r"; else echo "PROBE route-device blocked ($ids)"; fi
ifs=$(ls /sys/class/net | grep -v '^lo$' | tr '\n' ' ')
if [ -n "$ifs" ]; then echo "PROBE net-interface got-through $ifs"; else echo "PROBE net-interface blocked"; fi
c=""
for h in 10.0.2.2 192.168.122.1 172.17.0.1 10.0.0.1; do
  if echo x | nc -w 2 $h $port >/dev/null 2>&1; then c="$c $h"; fi
done
if [ -n "$c" ]; then echo "PROBE host-listener got-through$c"; else echo "PROBE host-listener blocked"; fi
`

// runGuestProbes runs guestProbes in inst and returns each probe's verdict.
func runGuestProbes(t *testing.T, inst driver.Instance, marker string, port int) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"/bin/sh", "-c", guestProbes, "probe", marker, fmt.Sprint(port)}, Cwd: "/"}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "PROBE" {
			got[f[1]] = strings.Join(f[2:], " ")
		}
	}
	if len(got) != 4 {
		t.Fatalf("probes: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	return got
}

// TestVMProbes runs the VM escape probes from inside a default microVM
// (each must be blocked), then against a weakened VM (QEMU unconfined, a
// host file shared as a disk, a network device), where the probes that the
// weakening opens get through: so they can fail. It also shows, from the
// host, that a confined QEMU cannot open a host file of root's (the
// weakening refused at start) and has no network but loopback.
func TestVMProbes(t *testing.T) {
	needVM(t)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	marker := "DSEC-HOST-SECRET-" + hex.EncodeToString(rnd[:])
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat(marker+"\n", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The node's listener on the host's loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	a, stopA := startBusybox(t, Config{StateDir: stateDir}, "probe")
	defer stopA()
	for name, v := range runGuestProbes(t, a, marker, port) {
		if !strings.HasPrefix(v, "blocked") {
			t.Errorf("default VM: probe %s: %s", name, v)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("default VM: the host listener accepted %d connections", n)
	}
	// An escaped guest in QEMU: its network namespace has only loopback.
	dev, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", a.st.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(dev), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name != "lo" {
			t.Errorf("QEMU's network namespace has interface %q", name)
		}
	}

	weak := []string{
		"-drive", "id=host,file=" + secret + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=host",
		"-netdev", "user,id=n0", "-device", "virtio-net-device,netdev=n0",
	}
	// Confined, QEMU cannot even open the host's file: the start fails.
	d, err := New(Config{StateDir: stateDir, ExtraArgs: weak[:4], NoSnapshots: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("probe-share"), Layers: imageLayers(t, "busybox"),
		CPU: 1, Memory: 256 << 20}); err == nil {
		inst.Destroy(context.Background())
		t.Errorf("a confined QEMU opened a host file of root's (mode 0600)")
	} else if !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("confined start with a host file: %v, want QEMU's Permission denied", err)
	}

	w, stopW := startBusybox(t, Config{StateDir: stateDir, Unconfined: true, ExtraArgs: weak, NoSnapshots: true}, "probe-weak")
	defer stopW()
	got := runGuestProbes(t, w, marker, port)
	for _, name := range []string{"host-file", "route-device"} {
		if !strings.HasPrefix(got[name], "got-through") {
			t.Errorf("weakened VM: probe %s: %s, want got-through", name, got[name])
		}
	}
	t.Logf("weakened VM: %v", got)
}
