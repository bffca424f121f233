package container

import (
	"os/exec"
	"strings"
	"testing"
)

// inodeScript compares d_ino from readdir with st_ino from lstat for every
// entry of the given directories and prints the mismatches. Mount points
// are skipped: there readdir shows the covered directory's inode and stat
// the mounted root's, on any host. In a sandbox it first copies /etc up
// and makes a directory in the writable layer.
const inodeScript = `
import os, sys
if sys.argv[1] == "sandbox":
    os.makedirs("/tmp/newdir/sub", exist_ok=True)
    open("/etc/dsec-copy-up", "w").close()
bad = n = 0
for d in sys.argv[2:]:
    dev = os.lstat(d).st_dev
    for e in os.scandir(d):
        st = os.lstat(e.path)
        if st.st_dev != dev and e.is_dir(follow_symlinks=False):
            continue
        n += 1
        if e.inode() != st.st_ino:
            bad += 1
            print("MISMATCH %s d_ino=%d st_ino=%d" % (e.path, e.inode(), st.st_ino))
print("checked %d entries, %d mismatches" % (n, bad))
sys.exit(1 if bad else 0)
`

var inodeDirs = []string{"/", "/usr", "/etc", "/usr/lib", "/usr/bin"}

// TestInodeNumbersConsistent: readdir and stat agree across the overlay
// root as they do on the host, and the check fails without xino.
func TestInodeNumbersConsistent(t *testing.T) {
	w := newWeakDriver(t)
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, append([]string{"-c", inodeScript, "host"}, inodeDirs...)...).CombinedOutput()
		t.Logf("host: %s", strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("the check fails on the host itself: %v", err)
		}
	}
	dirs := append([]string{"sandbox"}, append(inodeDirs, "/tmp", "/tmp/newdir")...)
	out, errOut, ex := run(t, w.start(t, weakening{}), append([]string{"python3", "-c", inodeScript}, dirs...)...)
	t.Logf("sandbox: %s", strings.TrimSpace(out))
	if ex.Code != 0 {
		t.Fatalf("readdir and stat disagree (exit %+v): %s %s", ex, out, errOut)
	}
	out, _, ex = run(t, w.start(t, weakening{xino: true}), append([]string{"python3", "-c", inodeScript}, dirs...)...)
	if ex.Code == 0 {
		t.Fatalf("the check passes without xino too, so it cannot fail: %s", out)
	}
	t.Logf("without xino: %d mismatches", strings.Count(out, "MISMATCH"))
}

// TestPingWithoutNetRaw: an ICMP datagram socket works on loopback through
// net.ipv4.ping_group_range, for root and for an unprivileged user, while
// CAP_NET_RAW is gone; without the range it is refused.
// pingScript sends an ICMP echo on loopback through a datagram socket.
const pingScript = `
import socket, struct, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
s.settimeout(5)
s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"dsec", ("127.0.0.1", 0))
data, addr = s.recvfrom(1024)
print("reply", data[0], addr[0], "uid", os.getuid())
`

func TestPingWithoutNetRaw(t *testing.T) {
	const script = pingScript
	w := newWeakDriver(t)
	inst := w.start(t, weakening{})
	for _, uid := range []string{"0", "1000"} {
		out, errOut, ex := run(t, inst, "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "python3", "-c", script)
		if ex.Code != 0 || !strings.HasPrefix(out, "reply 0 127.0.0.1") {
			t.Fatalf("uid %s: ping socket on loopback: %+v %q %q", uid, ex, out, errOut)
		}
	}
	if out, _, ex := run(t, w.start(t, weakening{ping: true}), "python3", "-c", script); ex.Code == 0 {
		t.Fatalf("ping socket works without ping_group_range too, so the check cannot fail: %q", out)
	}
}

// fsScript exercises what the issue lists beside inode numbers, on the
// writable layer and /dev/shm: statfs and df, hard links, user.* xattrs,
// fsync and fdatasync, rename over a file, O_TMPFILE.
const fsScript = `
import os, subprocess, sys
for d in ["/tmp", "/dev/shm", "/root"]:
    p = os.path.join(d, "dsec-fs-check-%d" % os.getpid())
    with open(p, "w") as f:
        f.write("data"); f.flush(); os.fsync(f.fileno()); os.fdatasync(f.fileno())
    os.link(p, p + ".link")
    a, b = os.stat(p), os.stat(p + ".link")
    assert a.st_ino == b.st_ino and a.st_nlink == 2 == b.st_nlink, (d, a, b)
    os.setxattr(p, "user.dsec", b"v")
    assert os.getxattr(p + ".link", "user.dsec") == b"v"
    assert "user.dsec" in os.listxattr(p)
    open(p + ".new", "w").close()
    os.replace(p + ".new", p)
    assert os.stat(p + ".link").st_nlink == 1 and os.stat(p).st_ino != a.st_ino
    st = os.statvfs(d)
    assert st.f_blocks > 0 and st.f_bavail <= st.f_blocks and st.f_bsize > 0, (d, st)
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600); os.write(fd, b"x"); os.close(fd)
    os.remove(p); os.remove(p + ".link")
df = subprocess.run(["df", "-P", "/", "/tmp", "/dev/shm"], capture_output=True, text=True)
assert df.returncode == 0 and len(df.stdout.splitlines()) == 4, df
print("ok")
`

// TestFSSemantics: statfs/df, hard links, user xattrs and fsync behave in a
// sandbox as on a plain host (the same script passes on the host).
func TestFSSemantics(t *testing.T) {
	w := newWeakDriver(t)
	if py, err := exec.LookPath("python3"); err == nil {
		if out, err := exec.Command(py, "-c", strings.Replace(fsScript, `"/root"]`, `"/var/tmp"]`, 1)).CombinedOutput(); err != nil {
			t.Fatalf("the script fails on the host: %v %s", err, out)
		}
	}
	out, errOut, ex := run(t, w.start(t, weakening{}), "python3", "-c", fsScript)
	if ex.Code != 0 || strings.TrimSpace(out) != "ok" {
		t.Fatalf("exit %+v: %s %s", ex, out, errOut)
	}
}
