package netpolicy

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDefaultHostDir: Managers of one network namespace share a directory;
// a node run in a namespace of its own has another, since what it
// coordinates is per namespace.
func TestDefaultHostDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	here := defaultHostDir()
	if again := defaultHostDir(); again != here || !strings.HasPrefix(here, "/run/dsec/netpolicy") {
		t.Fatalf("in this namespace: %s, then %s", here, again)
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
	if got := <-done; got == here || !strings.HasPrefix(got, "/run/dsec/netpolicy") {
		t.Fatalf("in a namespace of its own: %s (this namespace's: %s)", got, here)
	}
}
