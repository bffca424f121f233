// Package session defines dsec's session service: the one interface between the
// front ends (/v1, E2B, SandboxFusion) and whatever serves sandboxes (the local node
// agent, or in a cluster the API tier's router that calls nodes over RPC). Nothing in
// it is a host object: files go through the FS interface, a streaming exec is
// readers and writers plus a control channel, and every type is a pkg/api value, so
// an implementation can sit on the other side of a network. Decorators (the
// trajectory log, quotas, metrics) wrap a Service and are Services themselves.
//
// Errors are classified with internal/errdefs (not_found, invalid_argument,
// resource_exhausted, infrastructure, ...); each front end maps the code to its own
// wire form.
package session

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Service is the session service every front end calls and every node implements.
type Service interface {
	Info(ctx context.Context) (api.Info, error)

	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	Get(ctx context.Context, id string) (api.Sandbox, error)
	List(ctx context.Context) ([]api.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) (api.Sandbox, error)
	Resume(ctx context.Context, id string) (api.Sandbox, error)
	Reset(ctx context.Context, id string) (api.Sandbox, error)

	// Exec runs a command to completion and returns its captured output.
	Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error)
	// ExecStream runs a command with live I/O (see Stream). It returns when the
	// process has exited and all its output was written; the result carries no
	// output. With req.TTY the process gets a terminal and all output goes to
	// Stream.Stdout.
	ExecStream(ctx context.Context, id string, req api.ExecRequest, s Stream) (api.ExecResult, error)

	// Background processes survive the caller and a restart of the node.
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
	FS(ctx context.Context, id string) (FS, error)
	// Dial connects to a TCP port listening inside the sandbox.
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// Stream carries a streaming exec's live I/O. Writers are called from one
// goroutine at a time. An implementation across a network pumps these.
type Stream struct {
	// Stdin is the process's standard input; nil means none (immediate EOF).
	Stdin io.Reader
	// Stdout receives standard output (the terminal's output with a TTY).
	Stdout io.Writer
	// Stderr receives standard error; unused with a TTY.
	Stderr io.Writer
	// Control delivers signals and terminal resizes while the process runs.
	Control <-chan Control
	// Started is called once with the process's PID when it has started.
	Started func(pid int)
}

// Control is one out-of-band message to a running streaming exec: a signal to its
// process group (the terminal's foreground process group with a TTY), or a new
// terminal size. Exactly one field is set.
type Control struct {
	Signal int
	Resize *api.TermSize
}

// FS is a sandbox's file system. Every path is resolved inside the sandbox (".."
// and symlinks cannot leave it). Errors are classified (not_found, invalid_argument
// for a wrong file type, already_exists, payload_too_large, ...).
type FS interface {
	// Open opens a regular file for reading.
	Open(ctx context.Context, path string) (io.ReadCloser, api.FileInfo, error)
	Stat(ctx context.Context, path string) (api.FileInfo, error)
	// List lists a directory's entries (not recursive).
	List(ctx context.Context, path string) ([]api.FileInfo, error)
	// WriteFile creates or replaces a file with r's content, at most max bytes.
	WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error)
	Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool) (api.FileInfo, error)
	Remove(ctx context.Context, path string, recursive bool) error
	// Rename moves a file or directory within the sandbox, replacing a target file.
	Rename(ctx context.Context, from, to string) error
	// WriteTar writes path (a file or a directory tree) to w as a tar stream.
	WriteTar(ctx context.Context, path string, w io.Writer) error
	// ExtractTar unpacks a tar stream into the directory path.
	ExtractTar(ctx context.Context, path string, r io.Reader) error
	io.Closer
}
