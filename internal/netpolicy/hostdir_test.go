package netpolicy

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDefaultHostDir: Managers in the host's initial network namespace share
// /run/dsec/netpolicy; a node run in a namespace of its own has a directory
// of its own, since what it coordinates is per namespace.
func TestDefaultHostDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	here, own := defaultHostDir()
	if here != "/run/dsec/netpolicy" || own {
		t.Fatalf("in the host's initial namespace: %s", here)
	}
	done := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- "unshare: " + err.Error()
			return
		}
		a, own := defaultHostDir()
		b, _ := defaultHostDir()
		if a != b || !own {
			done <- "unstable: " + a + ", " + b
			return
		}
		done <- a
	}()
	if got := <-done; !strings.HasPrefix(got, "/run/dsec/netpolicy-netns-") {
		t.Fatalf("in a namespace of its own: %s (this namespace's: %s)", got, here)
	}
}

// TestOwnHostDirGoesWithItsLastManager: a node run in a network namespace of
// its own leaves no /run/dsec/netpolicy-netns-INODE behind once its Managers
// closed, but the directory stays while something still uses it: another
// holder of the lock, a Manager holding forwarding, a claimed address.
func TestOwnHostDirGoesWithItsLastManager(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		errc <- ownHostDirLifecycle(t)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// ownHostDirLifecycle runs TestOwnHostDirGoesWithItsLastManager on a thread
// of its own network namespace.
func ownHostDirLifecycle(t *testing.T) error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	open := func() (*Manager, error) {
		return New(Config{StateDir: t.TempDir(), DNS: "off", NoHostCheck: true})
	}
	exists := func(dir string) bool { _, err := os.Stat(dir); return err == nil }
	m, err := open()
	if err != nil {
		return err
	}
	dir := m.host.dir
	if !m.host.own || !strings.HasPrefix(dir, "/run/dsec/netpolicy-netns-") {
		return fmt.Errorf("host dir %s (own %v), want this namespace's own", dir, m.host.own)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// In use: forwarding held (ip_forward and the guard of this namespace)
	// and an address claimed.
	if err := m.host.holdForwarding(m.tag, m.cfg.StateDir); err != nil {
		return fmt.Errorf("hold forwarding: %w", err)
	}
	a := netip.MustParseAddr("100.96.0.0")
	if ok, err := m.host.claim(a, m.tag+"/sb"); !ok || err != nil {
		return fmt.Errorf("claim: %v %v", ok, err)
	}
	if err := m.Close(); err != nil {
		return err
	}
	if !exists(dir) {
		return fmt.Errorf("%s removed while forwarding was held and an address claimed", dir)
	}
	if err := m.host.releaseForwarding(m.tag); err != nil {
		return err
	}
	if err := m.Close(); err != nil {
		return err
	}
	if !exists(dir) {
		return fmt.Errorf("%s removed while an address was claimed", dir)
	}
	if err := m.host.unclaim(a, m.tag+"/sb"); err != nil {
		return err
	}

	// Another user holding the lock keeps it.
	other, err := m.host.openLock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	m2, err := open()
	if err != nil {
		other.Close()
		return err
	}
	if err := m2.Close(); err != nil {
		other.Close()
		return err
	}
	other.Close()
	if !exists(dir) {
		return fmt.Errorf("%s removed while another held its lock", dir)
	}

	// The last user gone: the directory goes.
	m3, err := open()
	if err != nil {
		return err
	}
	if err := m3.Close(); err != nil {
		return err
	}
	if exists(dir) {
		ents, _ := os.ReadDir(dir)
		return fmt.Errorf("%s left behind after its last Manager closed (%d entries)", dir, len(ents))
	}
	// A later Manager of the namespace makes it again as it needs it.
	if err := m3.host.lockForward(func() error { return nil }); err != nil || !exists(dir) {
		return fmt.Errorf("lock after removal: %v (dir there: %v)", err, exists(dir))
	}
	return nil
}
