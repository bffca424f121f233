// Package session defines dsec's session service: the one interface between the
// front ends (/v1, E2B, SandboxFusion, the dashboard) and whatever serves
// sandboxes (the local node, or in a cluster the API tier's router that calls
// nodes over RPC). Nothing in it is a host object: files go through the FS
// interface, a streaming exec is readers and writers plus a control channel, and
// every type is a pkg/api value, so an implementation can sit on the other side
// of a network.
//
// # One contract
//
// Service is made of typed method groups (Sandboxes, Processes, Files,
// Resources, Display, HTTPProxy, FnCalls, Images, Trajectories, Nodes,
// Projects). An implementation that serves only some of them embeds
// Unimplemented, whose every method answers not_implemented (gRPC's
// Unimplemented*Server pattern): the node agent has no nodes or projects, a
// cluster's router composes no images. A front end calls the contract and maps
// not_implemented to its wire error (501 on /v1 and SandboxFusion, E2B's own
// form); it never type-asserts the service (internal/deptest checks that).
//
// # Interceptors
//
// Cross-cutting concerns (the trajectory log, metrics and tracing, project
// quotas) are Interceptors: each returns a Service that embeds the next one, so
// it forwards every method it does not change and overrides the ones it
// observes. Chain composes them over a base service, and every role uses it:
//
//	dsec server:   Chain(node, trajectory.Interceptor, metrics.Interceptor, guard.Interceptor)
//	cluster node:  Chain(node, trajectory.Interceptor, metrics.Interceptor)
//	API tier:      Chain(router, metrics.Interceptor, batch counter, guard.Interceptor)
//
// so a replayed step (answered by the trajectory log) never reaches metrics as
// an exec, and a new method reaches every concern without a forwarding site.
//
// # Adding a session method
//
// Say sandboxes gain "Snapshot(ctx, id) (api.Snapshot, error)". Touch:
//
//  1. The contract: add the method to its group here (Sandboxes) and an
//     answer to Unimplemented (not_implemented).
//  2. Its implementations: the node agent (internal/agent), the node RPC
//     (a client method and a handler entry in internal/cluster/noderpc) and the
//     cluster's router (internal/cluster/router) when it routes by sandbox. An
//     implementation that does not serve it changes nothing: Unimplemented
//     answers for it.
//  3. The front ends that expose it: a /v1 route in internal/frontend/v1, and E2B
//     or SandboxFusion if their wire has the operation.
//
// Nothing else: every interceptor forwards it as it is (override it in one only
// to change what that concern does, e.g. count it in metrics or log it as a
// trajectory step), and no front end needs a type assertion or an option.
//
// Errors are classified with internal/errdefs (not_found, invalid_argument,
// resource_exhausted, not_implemented, infrastructure, ...); each front end maps
// the code to its own wire form.
package session

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Service is the session service every front end calls and every node
// implements: one interface made of typed method groups. An implementation that
// serves only some groups embeds Unimplemented, which answers the rest with
// not_implemented; a decorator embeds the Service it wraps (see Chain), so it
// forwards every method it does not change.
type Service interface {
	Sandboxes
	Processes
	Files
	Resources
	Display
	HTTPProxy
	FnCalls
	Images
	Trajectories
	Nodes
	Projects
}

// Sandboxes is the sandbox life cycle.
type Sandboxes interface {
	// Info describes the service: its node, backends and what each serves
	// (api.Info.Capabilities).
	Info(ctx context.Context) (api.Info, error)

	// Create creates a sandbox. With a start command (req.StartCmd or
	// req.Entrypoint) the node starts it as a background process and, with a
	// readiness check (req.ReadyCmd, req.ReadyPort), answers only once the
	// check passes; a start that fails first is start_failed, its sandbox
	// kept for inspection (api.Sandbox.Start says why). Every front end gets
	// this by filling the request.
	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	// CreateBatch creates every sandbox of reqs or none (the cluster's router
	// places the whole batch at once). A service without it answers
	// not_implemented and the validating interceptor (Validating) creates them one by one.
	CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error)
	Get(ctx context.Context, id string) (api.Sandbox, error)
	List(ctx context.Context) ([]api.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) (api.Sandbox, error)
	Resume(ctx context.Context, id string) (api.Sandbox, error)
	Reset(ctx context.Context, id string) (api.Sandbox, error)
	// Fork forks a sandbox into children that start from its current file
	// system (api.ForkRequest says what is and is not copied). A backend
	// without fork (driver.Capabilities.Fork) answers not_implemented.
	Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error)
	// Commit packs a sandbox's writable layer into a new environment
	// (api.CommitRequest); rules as Fork.
	Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error)
}

// Processes is running commands in a sandbox.
type Processes interface {
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
	// SendProcessInput writes to a background process started with OpenStdin,
	// closes its input or resizes its terminal (api.ProcessInput), whichever API
	// server started it: the process is the node's. An ended process is
	// conflict; one without open input (or a terminal, to resize)
	// invalid_argument.
	SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error
	// ProcessLogs reads a background process's "stdout" or "stderr" from offset.
	ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error)
	// FollowProcess answers with a background process's output past req's
	// offsets as soon as there is some, or the process has ended, or
	// req.WaitMs has passed (api.ProcessOutput; Ended once the caller has all
	// of it): a caller follows a process with one call per batch of output and
	// learns of its end at once, through whichever API server it asks.
	FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error)
}

// Files is a sandbox's file system and its TCP ports.
type Files interface {
	// FS opens the sandbox's file system; the caller closes it.
	FS(ctx context.Context, id string) (FS, error)
	// Dial connects to a TCP port listening inside the sandbox.
	Dial(ctx context.Context, id string, port int) (net.Conn, error)

	// CreateWatch watches a directory of the sandbox (the tree when
	// recursive); the node keeps the watch, so any API server reads it. A
	// missing path is not_found, a file invalid_argument, too many watches of
	// one sandbox resource_exhausted.
	CreateWatch(ctx context.Context, id string, req api.WatchRequest) (api.Watch, error)
	// WatchEvents returns the changes since the watch's last read (or its
	// creation); a watch whose directory is gone is removed (not_found).
	WatchEvents(ctx context.Context, id, watchID string) ([]api.WatchEvent, error)
	RemoveWatch(ctx context.Context, id, watchID string) error
}

// Resources is a sandbox's network policy, CPU class, memory reclaim and use.
type Resources interface {
	// SetNetwork replaces sandbox id's egress policy (internal/netpolicy) and
	// returns the sandbox; a bad policy is invalid_argument and changes nothing.
	SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error)
	// PauseWith pauses; with req.Reclaim it pushes the frozen sandbox's memory
	// out and says what moved.
	PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error)
	// SetDeadline moves a sandbox's deadline (its mutable TTL) and says what
	// happens at it (api.DeadlineRequest; ValidateDeadline). The sandbox's node
	// keeps the deadline with the sandbox and enforces it, so it holds whichever
	// API server set it and across a restart of the node.
	SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error)
	// SetCPUClass changes a sandbox's CPU class (api.CPUClassLS, api.CPUClassBE).
	SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error)
	// SandboxUsage returns the use of the sandboxes ids (unknown IDs are left
	// out), or of every sandbox when ids is empty. It must not wait for a
	// sandbox a long operation holds (it reports what it last read).
	SandboxUsage(ctx context.Context, ids []string) ([]api.SandboxUsage, error)
	// UsageHistory is a sandbox's usage samples, kept by its node so that
	// every API server answers the same series (api.UsageHistoryRequest).
	UsageHistory(ctx context.Context, id string, req api.UsageHistoryRequest) ([]api.UsageSample, error)
}

// Display is the screen of a sandbox whose backend has one
// (driver.Capabilities.Screenshot and Input); other backends answer
// not_implemented.
type Display interface {
	// Screenshot returns the display as a PNG.
	Screenshot(ctx context.Context, id string) ([]byte, error)
	// SendInput sends keyboard and mouse input to the display.
	SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error)
}

// HTTPProxy sends one HTTP request to a port inside a sandbox and returns the
// application's answer (the trajectory decorator implements it over Dial, so
// that proxied HTTP requests can be trajectory steps).
type HTTPProxy interface {
	HTTP(ctx context.Context, id string, port int, req HTTPRequest) (HTTPResponse, error)
}

// FnCalls runs FnCalls: one-shot sandboxes for short programs (online judge).
type FnCalls interface {
	FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error)
}

// Images describes, composes, removes and records images and layered
// environments.
type Images interface {
	// Images and Image describe images and environments with their layer
	// accounting (what was mounted and fetched).
	Images(ctx context.Context) ([]api.Image, error)
	Image(ctx context.Context, name string) (api.Image, error)
	Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error)
	RemoveImage(ctx context.Context, name string) error
	// RecordImage stores the chunks the sandboxes read from an environment's
	// layers as their prefetch lists.
	RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error)
	// ImagePulls returns the pulls of images by registry reference in flight
	// (ref set: only ref's), each naming its node: a node's own, or every
	// live node's through a cluster's router.
	ImagePulls(ctx context.Context, ref string) ([]api.PullProgress, error)
	// BuildImage builds environment req.Name from a Dockerfile in the build
	// context buildContext (a tar stream, plain or gzip) on this node
	// (internal/image/build). The cluster's router answers not_implemented.
	BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (api.BuildImageResult, error)
	// PruneBuildCache removes the Dockerfile build cache's entries no build
	// in progress and no sandbox uses (part of `dsec image prune`).
	PruneBuildCache(ctx context.Context) (api.BuildCachePruned, error)
}

// Trajectories is the trajectory log's API (/v1/trajectories): the trajectory
// decorator, a node's decorator over the node RPC, or a cluster's router.
type Trajectories interface {
	ListTrajectories(ctx context.Context) ([]api.Trajectory, error)
	GetTrajectory(ctx context.Context, id string) (api.Trajectory, error)
	DeleteTrajectory(ctx context.Context, id string) error
	RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error)
}

// Nodes is a cluster's node administration (the cluster's router).
type Nodes interface {
	ListNodes(ctx context.Context) ([]api.Node, error)
	// SetDrain sets (drain) or clears a node's drain flag; an unknown node is
	// not_found.
	SetDrain(ctx context.Context, node string, drain bool) error
	// RemoveNode removes a lost node from the cluster (its registration, env
	// in-use marks and request claims); a live node is conflict, an unknown
	// one not_found.
	RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error)
}

// Projects is projects and their quotas and tokens (project.Guard; its admin
// checks are its own).
type Projects interface {
	CreateProject(ctx context.Context, req api.CreateProjectRequest) (api.ProjectTokenResponse, error)
	ListProjects(ctx context.Context) ([]api.Project, error)
	GetProject(ctx context.Context, name string) (api.Project, error)
	DeleteProject(ctx context.Context, name string) error
	SetQuota(ctx context.Context, name string, q api.Quota) (api.Project, error)
	AddToken(ctx context.Context, name string) (api.ProjectTokenResponse, error)
	RemoveToken(ctx context.Context, name, id string) error
	// SetRegistryAuth stores a project's credentials for a registry host
	// (creates by its tokens fetch images from that registry with them);
	// the answer never carries them.
	SetRegistryAuth(ctx context.Context, name, host string, a api.RegistryAuth) (api.Project, error)
	RemoveRegistryAuth(ctx context.Context, name, host string) error
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
	// Started is called once with the process's PID when it has started,
	// before anything is written to Stdout or Stderr.
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
