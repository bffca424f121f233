package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// guestProbes is run as root inside a guest with the host's marker, the
// node listener's port, the peer VM's marker and port and MAC=ADDRESS/LEN
// pairs (the addresses a guest would give the interfaces it finds). Each
// probe prints one line "PROBE <name> <got-through|blocked> <detail>":
//   - host-file: any block device holding the host's marker (a host file
//     shared with the VM);
//   - peer-disk: any block device holding the peer VM's marker (written
//     at the end of the peer's writable disk);
//   - route-device: a virtio device that leads out of the VM (net 1, 9p 9,
//     vsock 19, virtio-fs 26);
//   - net-interface: any network interface but lo;
//   - host-listener: a TCP connection to the node's listener through the
//     addresses a guest would use for the host (QEMU's user-mode gateway,
//     the usual bridge gateways);
//   - raw-network: an ARP reply (a raw packet socket) from any of those
//     gateways or the peer's address on any interface but lo;
//   - peer-listener: the peer VM's marker read from its TCP listener.
const guestProbes = `
m=$1; port=$2; pm=$3; pport=$4; shift 4
for pair in "$@"; do
  for i in $(ls /sys/class/net); do
    if [ "$(cat /sys/class/net/$i/address)" = "${pair%%=*}" ]; then ip link set $i up; ip addr add ${pair#*=} dev $i; fi
  done
done
found=""; peer=""
for b in /sys/block/*; do
  n=${b##*/}; mm=$(cat $b/dev)
  mknod /tmp/probe-$n b ${mm%%:*} ${mm##*:} 2>/dev/null
  if head -c 67108864 /tmp/probe-$n 2>/dev/null | grep -q "$m"; then found="$found $n"; fi
  if head -c 67108864 /tmp/probe-$n 2>/dev/null | grep -q "$pm"; then peer="$peer $n"; fi
done
if [ -n "$found" ]; then echo "PROBE host-file got-through$found"; else echo "PROBE host-file blocked"; fi
if [ -n "$peer" ]; then echo "PROBE peer-disk got-through$peer"; else echo "PROBE peer-disk blocked"; fi
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
a=""
for i in $ifs; do
  for h in 10.0.2.2 10.9.0.1 192.168.122.1 172.17.0.1 10.0.0.1; do
    if arping -c 1 -w 1 -I $i $h >/dev/null 2>&1; then a="$a $i:$h"; fi
  done
done
if [ -n "$a" ]; then echo "PROBE raw-network got-through$a"; else echo "PROBE raw-network blocked"; fi
p=""
for h in 10.9.0.1 10.0.2.2; do
  if nc -w 2 $h $pport </dev/null 2>/dev/null | grep -q "$pm"; then p="$p $h"; fi
done
if [ -n "$p" ]; then echo "PROBE peer-listener got-through$p"; else echo "PROBE peer-listener blocked"; fi
`

// peerSetup makes a guest the probes' peer VM: it writes the peer marker
// ($1) at the end of its writable disk (a swap area the kernel refuses
// writes to while it is on, hence the swapoff) and serves it on TCP port
// $2, after giving its interfaces addresses (MAC=ADDRESS/LEN pairs).
const peerSetup = `
pm=$1; pport=$2; shift 2
for pair in "$@"; do
  for i in $(ls /sys/class/net); do
    if [ "$(cat /sys/class/net/$i/address)" = "${pair%%=*}" ]; then ip link set $i up; ip addr add ${pair#*=} dev $i; fi
  done
done
for b in /sys/block/*; do
  if [ "$(cat $b/serial 2>/dev/null)" = dsec-rw ]; then
    mm=$(cat $b/dev); mknod /tmp/rw b ${mm%%:*} ${mm##*:}
    swapoff /tmp/rw && printf '%s\n' "$pm" | dd of=/tmp/rw bs=512 seek=$(( $(cat $b/size) - 8 )) conv=notrunc,fsync 2>/dev/null &&
      swapon /tmp/rw && echo disk
  fi
done
printf '%s\n' "$pm" >/tmp/peer-marker
(while true; do nc -l -p $pport </tmp/peer-marker; done) </dev/null >/dev/null 2>&1 &
echo serving
`

// probeArgs are guestProbes' or peerSetup's arguments.
type probeArgs struct {
	marker, peerMarker string
	port, peerPort     int
	addrs              []string // MAC=ADDRESS/LEN
}

// allProbes are the probes guestProbes runs.
var allProbes = []string{"host-file", "peer-disk", "route-device", "net-interface", "host-listener", "raw-network", "peer-listener"}

// runGuestProbes runs guestProbes in inst and returns each probe's verdict.
func runGuestProbes(t *testing.T, inst driver.Instance, a probeArgs) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"/bin/sh", "-c", guestProbes, "probe", a.marker, fmt.Sprint(a.port), a.peerMarker, fmt.Sprint(a.peerPort)}, a.addrs...)
	r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: args, Cwd: "/"}, "")
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
	if len(got) != len(allProbes) {
		t.Fatalf("probes: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	return got
}

// startPeer runs peerSetup in inst.
func startPeer(t *testing.T, inst driver.Instance, a probeArgs) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"/bin/sh", "-c", peerSetup, "peer", a.peerMarker, fmt.Sprint(a.peerPort)}, a.addrs...)
	r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: args, Cwd: "/"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "disk\nserving\n" {
		t.Fatalf("peer setup: %q (stderr %q)", r.Stdout, r.Stderr)
	}
}

// guestNICModules are the guest kernel's virtio-net driver and its
// dependencies (the weakened VMs' network devices need them; the microVM's
// own initramfs has none): from the VM directory's modules (scripts/setup.sh
// copies them there since the probes need them), else from the same kernel
// package unpacked for make test-cgv2.
func guestNICModules(t *testing.T) []string {
	t.Helper()
	names := []string{"failover", "net_failover", "virtio_net"}
	var k struct {
		Release string `json:"release"`
	}
	b, err := os.ReadFile(filepath.Join(DefaultVMDir, "kernel.json"))
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	if err != nil {
		t.Fatalf("guest kernel release: %v", err)
	}
	var out []string
	for _, n := range names {
		p := filepath.Join(DefaultVMDir, "modules", n+".ko")
		if _, err := os.Stat(p); err != nil {
			root := filepath.Join("/var/lib/dsec/cgv2", "linux-image-"+k.Release, "x/lib/modules", k.Release, "kernel")
			p = ""
			_ = filepath.WalkDir(root, func(q string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == n+".ko" {
					p = q
					return filepath.SkipAll
				}
				return nil
			})
		}
		if p == "" {
			t.Fatalf("no %s.ko for the guest kernel %s: scripts/setup.sh copies it into %s/modules (a host set up before it did: remove %s/kernel.json and run it again)", n, k.Release, DefaultVMDir, DefaultVMDir)
		}
		out = append(out, p)
	}
	return out
}

// freePort is a TCP port on the host's loopback nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestVMProbes runs the VM escape probes (host files, node listeners, raw
// network, another VM's disk and listener) from inside a default microVM,
// with a default peer VM beside it: each must be blocked. Then against a
// weakened VM (QEMU unconfined, a host file and the peer's disk shared as
// disks, a user-mode network device and one linked to a weakened peer VM,
// the guest's network driver loaded), where every probe gets through: so
// each can fail. It also shows, from the host, that a confined QEMU cannot
// open a host file of root's (the weakening refused at start) and has no
// network but loopback.
func TestVMProbes(t *testing.T) {
	needVM(t)
	mark := func() string {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		return hex.EncodeToString(rnd[:])
	}
	marker, peerMarker := "DSEC-HOST-SECRET-"+mark(), "DSEC-PEER-VM-"+mark()
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
	args := probeArgs{marker: marker, peerMarker: peerMarker, port: ln.Addr().(*net.TCPAddr).Port, peerPort: 7777}

	// The real configuration: two default VMs, a peer and the prober.
	peer, stopPeer := startBusybox(t, Config{StateDir: stateDir}, "probe-peer")
	defer stopPeer()
	startPeer(t, peer, args)
	a, stopA := startBusybox(t, Config{StateDir: stateDir}, "probe")
	defer stopA()
	for name, v := range runGuestProbes(t, a, args) {
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

	hostDisk := []string{"-drive", "id=host,file=" + secret + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=host"}
	// Confined, QEMU cannot even open the host's file: the start fails.
	d, err := New(Config{StateDir: stateDir, ExtraArgs: hostDisk, NoSnapshots: true})
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

	// The weakened configuration: a peer VM on a network link (QEMU's
	// socket backend on the host's loopback) and a prober with the host's
	// file, the real peer's disk, a user-mode network and that link.
	mods := guestNICModules(t)
	link := freePort(t)
	wpeer, stopWPeer := startBusybox(t, Config{StateDir: stateDir, Unconfined: true, NoSnapshots: true, ExtraGuestModules: mods,
		ExtraArgs: []string{"-netdev", fmt.Sprintf("socket,id=p0,listen=127.0.0.1:%d", link),
			"-device", "virtio-net-device,netdev=p0,mac=52:54:00:09:00:01"}}, "probe-weak-peer")
	defer stopWPeer()
	startPeer(t, wpeer, probeArgs{peerMarker: peerMarker, peerPort: args.peerPort, addrs: []string{"52:54:00:09:00:01=10.9.0.1/24"}})
	weak := append(slices.Clone(hostDisk),
		"-drive", "id=peer,file="+filepath.Join(peer.st.Dir, "disk.raw")+",format=raw,if=none,readonly=on,file.locking=off",
		"-device", "virtio-blk-device,drive=peer",
		"-netdev", "user,id=n0", "-device", "virtio-net-device,netdev=n0,mac=52:54:00:00:00:0f",
		"-netdev", fmt.Sprintf("socket,id=n1,connect=127.0.0.1:%d", link), "-device", "virtio-net-device,netdev=n1,mac=52:54:00:09:00:02")
	w, stopW := startBusybox(t, Config{StateDir: stateDir, Unconfined: true, ExtraArgs: weak, NoSnapshots: true, ExtraGuestModules: mods}, "probe-weak")
	defer stopW()
	wargs := args
	wargs.addrs = []string{"52:54:00:00:00:0f=10.0.2.15/24", "52:54:00:09:00:02=10.9.0.2/24"}
	got := runGuestProbes(t, w, wargs)
	for _, name := range allProbes {
		if !strings.HasPrefix(got[name], "got-through") {
			t.Errorf("weakened VM: probe %s: %s, want got-through", name, got[name])
		}
	}
	if accepted.Load() == 0 {
		t.Errorf("weakened VM: the host listener accepted no connection")
	}
	t.Logf("weakened VM: %v", got)
}
