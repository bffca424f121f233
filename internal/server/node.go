package server

import (
	"context"
	"io"
	"net"

	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Node is what the HTTP layer needs from a node agent. internal/agent.Manager
// implements it; errors are classified with internal/errdefs.
type Node interface {
	Info(ctx context.Context) api.Info

	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	Get(ctx context.Context, id string) (api.Sandbox, error)
	List(ctx context.Context) ([]api.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) (api.Sandbox, error)
	Resume(ctx context.Context, id string) (api.Sandbox, error)
	Reset(ctx context.Context, id string) (api.Sandbox, error)

	// Exec runs a command to completion (blocking exec).
	Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error)
	// ExecStream runs a command with live I/O; it returns when the process exited
	// and its output was delivered. The result carries no output.
	ExecStream(ctx context.Context, id string, req api.ExecRequest, sio StreamIO) (api.ExecResult, error)

	StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error)
	ListProcesses(ctx context.Context, id string) ([]api.Process, error)
	GetProcess(ctx context.Context, id, procID string) (api.Process, error)
	// WaitProcess blocks until the process exits or ctx ends (then it returns the
	// still-running process and no error).
	WaitProcess(ctx context.Context, id, procID string) (api.Process, error)
	KillProcess(ctx context.Context, id, procID string, sig int) error
	// ProcessLogs reads a background process's "stdout" or "stderr" from offset.
	ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error)

	// FS opens the sandbox's file system; the caller closes it.
	FS(ctx context.Context, id string) (*fsops.FS, error)
	// Dial connects to a TCP port listening inside the sandbox.
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// StreamIO carries a streaming exec's live I/O.
type StreamIO struct {
	Stdin   io.Reader // nil: no stdin
	Stdout  io.Writer // must be safe to call from one goroutine at a time
	Stderr  io.Writer
	Started func(pid int)
	Signals <-chan int // signals to deliver to the process group
}
