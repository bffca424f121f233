// Package driver defines the seam every sandbox backend (container, fncall, microvm,
// fullvm, and the mock used by tests) implements, in the style of Nomad's task
// drivers: start, recover after an agent restart, cleanup and destroy, plus a session
// surface through the instance (exec with streams and an optional terminal, files,
// dial). Nothing in it is container-shaped: stdio are readers and writers (the
// driver makes pipes or a terminal as it needs), files go through the instance's
// session.FS, and layers arrive as descriptions the driver decides how to present.
//
// What a backend can do is data: Driver.Capabilities. Optional behaviour that
// needs methods (pause) is a small separate interface an instance implements, never
// a stub. A Registry holds one driver per backend name.
package driver

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Spec is everything a driver needs to start one sandbox.
type Spec struct {
	ID    string
	Image string
	// Layers are the read-only layers of the root file system, base first.
	Layers   []Layer
	CPU      float64 // cores
	Memory   int64   // bytes
	Disk     int64   // writable layer bytes
	PidsMax  int64
	Env      []string // KEY=VALUE added to every process
	Hostname string
	// UserNS asks for (true) or against (false) a user namespace that maps
	// sandbox root to an unprivileged host uid; nil: the driver's default.
	// Drivers without user namespaces ignore it.
	UserNS *bool
	// CPUClass is api.CPUClassLS or api.CPUClassBE ("" is LS); see CPUClasser.
	CPUClass string
	// KSM opts the sandbox's processes into KSM merging (PR_SET_MEMORY_MERGE).
	KSM bool `json:",omitempty"`
	// AllowSetuid lets processes gain privileges by executing setuid or
	// file-capability programs (sudo), up to what sandbox root holds: the
	// container driver sets no no_new_privs. Drivers whose sandboxes have
	// their own kernel ignore it (their guests never set no_new_privs).
	AllowSetuid bool `json:",omitempty"`
	// Network is the egress policy the sandbox starts with (nil: loopback
	// only). A driver that implements NetworkAtStart applies it while the
	// sandbox starts; the agent applies it after Start otherwise.
	Network *api.NetworkPolicy `json:"-"`
}

// Layer describes one read-only layer. The driver chooses how to present it: the
// container driver stacks mounted directories with overlayfs, a VM driver would
// attach EROFS blobs as block or pmem devices.
type Layer struct {
	Role   string `json:"role,omitempty"`   // base, toolkit, workspace (informational)
	Digest string `json:"digest,omitempty"` // content digest, if the layer has one
	Kind   string `json:"kind"`             // LayerDir or LayerEROFS
	Path   string `json:"path"`             // the directory, or the EROFS blob file
}

// Layer kinds.
const (
	LayerDir   = "dir"   // Path is a directory tree (a plain image or a mounted layer)
	LayerEROFS = "erofs" // Path is an EROFS image file
)

// DirLayers describes lower directories given top-most first (overlayfs order)
// as directory layers, base first.
func DirLayers(lower []string) []Layer {
	out := make([]Layer, 0, len(lower))
	for i := len(lower) - 1; i >= 0; i-- {
		out = append(out, Layer{Kind: LayerDir, Path: lower[i]})
	}
	return out
}

// UnmarshalJSON reads a Spec, including ones recorded before layers were
// descriptions (a "Lower" list of directories, top-most first).
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	var v struct {
		plain
		Lower []string
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Spec(v.plain)
	if len(s.Layers) == 0 && len(v.Lower) > 0 {
		s.Layers = DirLayers(v.Lower)
	}
	return nil
}

// Isolation says what separates a sandbox from the host.
type Isolation string

const (
	// IsolationNone: processes are plain host processes (the mock driver).
	IsolationNone Isolation = "none"
	// IsolationNamespaces: Linux namespaces, cgroups, a private root (containers).
	IsolationNamespaces Isolation = "namespaces"
	// IsolationVM: a guest kernel.
	IsolationVM Isolation = "vm"
)

// Capabilities states what a backend can do, as data (Nomad's Capabilities). The
// agent routes and refuses requests by it; the conformance suite skips what a
// driver does not claim.
type Capabilities struct {
	Isolation Isolation
	// Pause: instances implement Pauser.
	Pause bool
	// Fork, Commit: instances implement Snapshotter (the agent starts fork
	// children on a copy of the writable layer, and packs one into a layer).
	Fork, Commit bool
	// Screenshot, Input: reserved for the VM backends.
	Screenshot, Input bool
	// TTY: ProcSpec.TTY gives the process a terminal.
	TTY bool
	// Credentials: processes run with the UID, GID and groups they ask for.
	Credentials bool
	// Limits: CPU, memory and pids limits are enforced, and OOM kills reported.
	Limits bool
	// LayerKinds are the layer kinds Start accepts.
	LayerKinds []string
}

// Driver creates and recovers sandboxes of one backend.
type Driver interface {
	// Name is the backend name ("container").
	Name() string
	// Capabilities says what the backend can do.
	Capabilities() Capabilities
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
	// Exec starts a process with the given stdio. Proc.Wait returns once the
	// process exited and its output was copied to stdio's writers.
	Exec(ctx context.Context, p ProcSpec, stdio Stdio) (Proc, error)
	// Attach reconnects to a background process started with a Tag, even one
	// started by a previous agent process. For a process with a terminal, stdio
	// carries its terminal I/O from now on; otherwise it is unused (the output
	// went to the writers given at start).
	Attach(ctx context.Context, tag string, stdio Stdio) (Proc, error)
	// FS opens the sandbox's file system; every path resolves inside it.
	FS(ctx context.Context) (session.FS, error)
	// Dial connects to a TCP port on the sandbox's loopback.
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Destroy kills every process and releases every resource.
	Destroy(ctx context.Context) error
}

// IDMapped is implemented by instances that may run in a user namespace.
// IDMap returns the host ID of the sandbox's root and the size of its
// range (size 0: no user namespace, IDs are the host's). Files the node
// creates in the sandbox from the host must get mapped owners, and the
// file systems a user namespace mounted refuse to create files for host
// root at all (see fsops.NewMapped and fsops.AsRoot).
type IDMapped interface {
	IDMap() (hostID, size uint32)
}

// Stdio are a process's standard streams. An *os.File is handed to the process as
// it is (a background process writes straight into its log file); anything else
// is pumped through a pipe (or the terminal) by the driver.
type Stdio struct {
	Stdin  io.Reader // nil: no input (/dev/null)
	Stdout io.Writer // nil: discarded; with a TTY, the terminal's output
	Stderr io.Writer // nil: discarded; unused with a TTY
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
	// TTY, if set, gives the process a terminal of this size as its controlling
	// terminal and stdio, in a session of its own.
	TTY *api.TermSize
	// OutputCap > 0 bounds what the process can write through stdout and
	// stderr (files, for background logs) to that many bytes each, followed
	// by a truncation marker; the sandbox keeps the rest to itself. It does
	// not apply to a TTY process: its output is one stream through the
	// caller's writer, which the caller bounds (procio.CapWriter).
	OutputCap int64
}

// Proc is a started process.
type Proc interface {
	PID() int
	// Wait blocks until the process exits and returns how.
	Wait(ctx context.Context) (Exit, error)
	// Signal sends sig to the process group, or with a terminal to the
	// terminal's foreground process group (the job a shell runs).
	Signal(sig int) error
	// Resize sets the terminal's size (the program gets SIGWINCH); an
	// invalid_argument error for a process without a terminal.
	Resize(cols, rows int) error
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

// Pauser is implemented by instances that can freeze a sandbox
// (Capabilities.Pause).
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
