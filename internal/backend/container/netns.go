package container

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Dial implements driver.Instance: it connects to 127.0.0.1:port inside the
// sandbox's network namespace. The socket is created on an OS thread that has
// entered that namespace (a socket belongs to the namespace it was created in), then
// the thread returns to its own namespace.
func (in *instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	if !in.alive() {
		return nil, in.gone()
	}
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", in.st.PID))
	if err != nil {
		return nil, in.gone()
	}
	defer target.Close()

	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, errdefs.Internal(err, "open own network namespace")
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, errdefs.Internal(err, "enter sandbox network namespace")
	}
	var d net.Dialer
	conn, dialErr := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread is stuck in the sandbox's namespace: never unlock it, so the
		// runtime destroys it when this goroutine ends.
		if conn != nil {
			conn.Close()
		}
		return nil, errdefs.Internal(err, "leave sandbox network namespace")
	}
	runtime.UnlockOSThread()
	if dialErr != nil {
		return nil, errdefs.Wrap(api.CodeBadGateway, dialErr, "connect to port %d in sandbox", port)
	}
	return conn, nil
}
