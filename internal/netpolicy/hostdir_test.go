package netpolicy

import (
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
	here := defaultHostDir()
	if here != "/run/dsec/netpolicy" {
		t.Fatalf("in the host's initial namespace: %s", here)
	}
	done := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- "unshare: " + err.Error()
			return
		}
		a, b := defaultHostDir(), defaultHostDir()
		if a != b {
			done <- "unstable: " + a + ", " + b
			return
		}
		done <- a
	}()
	if got := <-done; !strings.HasPrefix(got, "/run/dsec/netpolicy-netns-") {
		t.Fatalf("in a namespace of its own: %s (this namespace's: %s)", got, here)
	}
}
