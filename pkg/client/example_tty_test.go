package client_test

import (
	"context"
	"os"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// A Python REPL on a terminal in the sandbox: type into it, resize it, read its
// screen from Stdout.
func ExampleClient_StartExecStream_tty() {
	cl, err := client.FromEnv()
	if err != nil {
		return
	}
	ctx := context.Background()
	s, err := cl.StartExecStream(ctx, "sb-0123456789abcdef.node",
		api.ExecRequest{Cmd: []string{"python3", "-i"}, TTY: true, Cols: 120, Rows: 40},
		client.StreamOptions{Stdout: os.Stdout})
	if err != nil {
		return
	}
	_, _ = s.Write([]byte("6*7\r"))
	_ = s.Resize(100, 30) // the REPL gets SIGWINCH
	_, _ = s.Write([]byte("\x04"))
	res, err := s.Wait()
	_, _ = res, err
}
