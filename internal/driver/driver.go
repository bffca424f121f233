// Package driver defines the interface every sandbox backend (container, fncall,
// microvm, fullvm) implements, in the style of Nomad's task drivers: start, recover
// after an agent restart, destroy, plus a session surface (exec, files, dial). Optional
// capabilities such as pause are separate small interfaces a driver may implement.
package driver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"time"
)

// Spec is everything a driver needs to start one sandbox.
type Spec struct {
	ID       string
	Image    string
	Lower    []string // read-only lower directories, top-most first
	CPU      float64  // cores
	Memory   int64    // bytes
	Disk     int64    // writable layer bytes
	PidsMax  int64
	Env      []string // KEY=VALUE added to every process
	Hostname string
	// CPUClass is api.CPUClassLS or api.CPUClassBE ("" is LS); see CPUClasser.
	CPUClass string
	// KSM opts the sandbox's processes into KSM merging (PR_SET_MEMORY_MERGE).
	KSM bool `json:",omitempty"`
}

// Driver creates and recovers sandboxes of one backend.
type Driver interface {
	// Name is the backend name ("container").
	Name() string
	// Start creates and starts a sandbox; on error nothing is left behind.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Recover re-adopts a sandbox a previous agent process started, from the state
	// Instance.State returned then. It fails with a not_found class error when the
	// sandbox is gone; the caller then calls Cleanup.
	Recover(ctx context.Context, spec Spec, state json.RawMessage) (Instance, error)
	// Cleanup releases whatever a dead sandbox may have left (cgroups, state files).
	Cleanup(ctx context.Context, spec Spec, state json.RawMessage) error
}

// Instance is one running sandbox.
type Instance interface {
	ID() string
	// State is the driver's durable description, stored by the agent and handed
	// back to Recover.
	State() json.RawMessage
	// Done is closed when the sandbox's init has died.
	Done() <-chan struct{}
	// Exec starts a process. Stdio files are handed to the process as fds 0-2.
	Exec(ctx context.Context, p ProcSpec, stdio [3]*os.File) (Proc, error)
	// Attach reconnects to a background process started with a Tag, even one
	// started by a previous agent process.
	Attach(ctx context.Context, tag string) (Proc, error)
	// Root opens the sandbox's root directory (O_PATH) for file operations that
	// resolve every path inside it.
	Root() (*os.File, error)
	// Dial connects to a TCP port on the sandbox's loopback.
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Destroy kills every process and releases every resource.
	Destroy(ctx context.Context) error
}

// ProcSpec describes one process to start inside a sandbox.
type ProcSpec struct {
	Args []string
	Env  []string // full environment, KEY=VALUE
	Cwd  string
	UID  int
	GID  int
	// Groups are supplementary group IDs.
	Groups []int
	// Tag names a background process so it can be re-attached; empty for
	// foreground execs.
	Tag string
	// OutputCap > 0 bounds what the process can write through stdout and
	// stderr (files, for background logs) to that many bytes each, followed
	// by a truncation marker; the sandbox keeps the rest to itself.
	OutputCap int64
}

// Proc is a started process.
type Proc interface {
	PID() int
	// Wait blocks until the process exits and returns how.
	Wait(ctx context.Context) (Exit, error)
	// Signal sends sig to the process group.
	Signal(sig int) error
	// Close releases the connection to the process without killing it.
	io.Closer
}

// Exit says how a process ended.
type Exit struct {
	Code      int // exit code, -1 when signalled
	Signal    int // terminating signal, 0 if it exited
	OOMKilled bool
	CPUTime   time.Duration
	MaxRSS    int64 // bytes
	// StartErr is set when the process could not be started (exec failed);
	// Code is then 127 (not found) or 126 (not executable).
	StartErr string
}

// Pauser is implemented by drivers that can freeze a sandbox.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Stats is implemented by instances that report resource use.
type Stats interface {
	MemoryUsage() (int64, error)
}

// Exited reports whether inst's init has died.
func Exited(inst Instance) bool {
	select {
	case <-inst.Done():
		return true
	default:
		return false
	}
}
