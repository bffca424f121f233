// Package api holds the wire types of dsec's HTTP API (/v1): requests, responses and
// the machine-readable error model. The server, the Go client and the CLI share them;
// the committed OpenAPI document (openapi.yaml) describes the same shapes.
package api

import "time"

// Backend names. Only "container" is implemented today; the others plug in behind the
// same driver interface.
const (
	BackendContainer = "container"
	BackendFnCall    = "fncall"
	BackendMicroVM   = "microvm"
	BackendFullVM    = "fullvm"
)

// Sandbox states.
const (
	StateRunning = "running"
	StatePaused  = "paused"
	StateExited  = "exited" // its init died; it holds no resources but its record
	// StatePulling: a create with wait false answered before the node had
	// its image; the node fetches it (Sandbox.Pull) and then starts the
	// sandbox (running), or the fetch or start fails (failed). Only GET,
	// list and DELETE serve a sandbox in this state.
	StatePulling = "pulling"
	// StateFailed: a create with wait false whose fetch or start failed
	// (Sandbox.Error says why). It holds no resources but its record; DELETE
	// removes it.
	StateFailed = "failed"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// Backend selects the isolation backend; empty means "container".
	Backend string `json:"backend,omitempty"`
	// Image names the environment; empty means the node's default image.
	Image string `json:"image,omitempty"`
	// CPU is the CPU limit in cores (0.5 = half a core); 0 means the default (1).
	CPU float64 `json:"cpu,omitempty"`
	// MemoryBytes is the memory limit; 0 means the default (512 MiB).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// DiskBytes limits the writable layer; 0 means the default (1 GiB).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// PidsMax limits processes and threads; 0 means the default (1024).
	PidsMax int64 `json:"pids_max,omitempty"`
	// UserNamespace runs a container sandbox in a user namespace of its own
	// (true; sandbox root is an unprivileged host uid) or not (false); unset
	// means the node's default (`dsec server --userns`).
	UserNamespace *bool `json:"user_namespace,omitempty"`
	// TTLSeconds deletes the sandbox this long after creation; 0 means no TTL.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// OnExpiry is what happens when the TTL ends: "delete" (the default) or
	// "pause". PUT /v1/sandboxes/{id}/deadline moves the deadline later.
	OnExpiry string `json:"on_expiry,omitempty"`
	// IdleTimeoutSeconds deletes the sandbox after this long without a session
	// operation; 0 means no idle expiry.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// Env is added to every process started in the sandbox.
	Env map[string]string `json:"env,omitempty"`
	// Labels are free-form metadata returned with the sandbox.
	Labels map[string]string `json:"labels,omitempty"`
	// RequestID makes create idempotent: a retry with the same ID returns the sandbox
	// the first request created. The Idempotency-Key header is an alias.
	RequestID string `json:"request_id,omitempty"`
	// Network opts the sandbox into egress under a policy; nil: loopback only.
	Network *NetworkPolicy `json:"network,omitempty"`
	// CPUClass is "ls" (latency-sensitive) or "be" (best-effort); empty means
	// the node's default (dsec server --cpu-class-default).
	CPUClass string `json:"cpu_class,omitempty"`
	// KSM lets the kernel merge identical pages of this sandbox's processes
	// with other KSM sandboxes' (PR_SET_MEMORY_MERGE on its init, inherited).
	KSM bool `json:"ksm,omitempty"`
	// AllowSetuid lets a container sandbox's processes gain privileges by
	// executing setuid programs (sudo, su) up to what sandbox root holds
	// (no_new_privs is not set); sandbox root's capabilities, seccomp filter
	// and user namespace bound every process either way. E2B sandboxes
	// have it (E2B's user has passwordless sudo).
	AllowSetuid bool `json:"allow_setuid,omitempty"`
	// Node pins the sandbox to the named node of a cluster (create --node);
	// unknown names are invalid_argument. A single-node server accepts only its
	// own name.
	Node string `json:"node,omitempty"`
	// Constraints are node label constraints ("zone": "a"): the sandbox goes to a
	// node whose labels match every one (invalid_argument when no node has them).
	Constraints map[string]string `json:"constraints,omitempty"`

	// StartCmd is a shell command (run with /bin/sh -c) started as a
	// background process once the sandbox exists; Entrypoint starts the
	// image's Entrypoint and Cmd instead (an image with neither is
	// invalid_argument). At most one of them. The process runs as an exec
	// would with no user, cwd or env of its own (the image's defaults, the
	// sandbox's env) and carries the label LabelStart.
	StartCmd   string `json:"start_cmd,omitempty"`
	Entrypoint bool   `json:"entrypoint,omitempty"`
	// ReadyCmd (a shell command that must exit 0) and ReadyPort (a TCP port
	// inside the sandbox that must accept a connection) hold create's answer
	// until the started command is ready; with both, both must pass. They
	// need StartCmd or Entrypoint. ReadyTimeoutMs bounds the wait (0: 60 s;
	// at most MaxReadyTimeoutMs). A start command that ends before it is
	// ready, or is not ready in time, fails the create with start_failed,
	// and the sandbox is kept for inspection (Sandbox.Start says why).
	ReadyCmd       string `json:"ready_cmd,omitempty"`
	ReadyPort      int    `json:"ready_port,omitempty"`
	ReadyTimeoutMs int64  `json:"ready_timeout_ms,omitempty"`

	// RegistryAuth gives credentials by registry host (HOST[:PORT] as the
	// image reference names it; docker.io for Docker Hub) for fetching
	// Image: sent to that registry only (not to its mirrors), in place of
	// the node's own (--registry-config). The API tier adds the creating
	// project's registry credentials (PUT /v1/projects/{name}/registries/{host})
	// for hosts the request does not name. Never stored with the sandbox
	// or shown.
	RegistryAuth map[string]RegistryAuth `json:"registry_auth,omitempty"`

	// Wait false answers at once when the image is a registry reference the
	// node does not have yet: the sandbox is in state pulling while the node
	// fetches it, then running, or failed with the fetch's error. Unset or
	// true: the create answers once the sandbox runs (or with the error).
	Wait *bool `json:"wait,omitempty"`
}

// Waits reports whether the create answers only once the sandbox runs
// (Wait unset or true).
func (r CreateSandboxRequest) Waits() bool { return r.Wait == nil || *r.Wait }

// Start commands (CreateSandboxRequest.StartCmd, Entrypoint).
const (
	// DefaultReadyTimeoutMs is the readiness wait of a request that names none.
	DefaultReadyTimeoutMs = 60_000
	// MaxReadyTimeoutMs is the longest readiness wait a create may ask for.
	MaxReadyTimeoutMs = 600_000
	// LabelStart marks the background process a create started (its value
	// is "start_cmd" or "entrypoint").
	LabelStart = "dsec.start"
)

// Start states (StartStatus.State).
const (
	// StartStarting: the command runs and create waits for it to be ready.
	StartStarting = "starting"
	// StartStarted: the command was started and nothing checks readiness.
	StartStarted = "started"
	// StartReady: the readiness check passed before create answered.
	StartReady = "ready"
	// StartFailed: the command ended before it was ready, or was not ready in
	// time; Error says which, with the end of its output.
	StartFailed = "failed"
)

// StartStatus is the outcome of a create's start command (Sandbox.Start).
type StartStatus struct {
	State string `json:"state"`
	// ProcessID is the background process running the command
	// (GET .../processes/{id}, its logs).
	ProcessID string   `json:"process_id,omitempty"`
	Cmd       []string `json:"cmd,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// BatchCreateRequest is the body of POST /v1/sandboxes:batch: every sandbox is
// created or none is. Give each its own request_id so that a retried batch
// creates nothing twice.
type BatchCreateRequest struct {
	Sandboxes []CreateSandboxRequest `json:"sandboxes"`
}

// BatchCreateResponse lists the created sandboxes in request order.
type BatchCreateResponse struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Sandbox describes one sandbox.
type Sandbox struct {
	ID      string `json:"id"`
	Backend string `json:"backend"`
	Image   string `json:"image"`
	// ImageRef and ImageDigest are set when Image is a registry reference:
	// the reference normalised as Docker does and the digest it resolved to
	// at create (the sandbox keeps that file system whatever the tag does).
	ImageRef           string            `json:"image_ref,omitempty"`
	ImageDigest        string            `json:"image_digest,omitempty"`
	State              string            `json:"state"`
	CPU                float64           `json:"cpu"`
	MemoryBytes        int64             `json:"memory_bytes"`
	DiskBytes          int64             `json:"disk_bytes"`
	PidsMax            int64             `json:"pids_max"`
	CreatedAt          time.Time         `json:"created_at"`
	ExpiresAt          *time.Time        `json:"expires_at,omitempty"`
	OnExpiry           string            `json:"on_expiry,omitempty"` // with ExpiresAt: "delete" or "pause"
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty"`
	LastActiveAt       time.Time         `json:"last_active_at"`
	Env                map[string]string `json:"env,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	RequestID          string            `json:"request_id,omitempty"`
	Network            *NetworkStatus    `json:"network,omitempty"`
	CPUClass           string            `json:"cpu_class,omitempty"`
	// Reclaimed: the sandbox's memory was pushed out of RAM; resume (or the next
	// use) brings it back.
	Reclaimed bool `json:"reclaimed,omitempty"`
	KSM       bool `json:"ksm,omitempty"`
	// AllowSetuid: setuid programs (sudo) work in the sandbox (see
	// CreateSandboxRequest.AllowSetuid).
	AllowSetuid bool `json:"allow_setuid,omitempty"`
	// VM is how a VM sandbox's guest runs (KVM or TCG, and why).
	VM *VMAccel `json:"vm,omitempty"`
	// Screen: the sandbox has a display; GET /v1/sandboxes/{id}/screen returns
	// its latest screenshot.
	Screen bool `json:"screen,omitempty"`
	// Start is the outcome of the start command the create asked for
	// (start_cmd or entrypoint); nil without one.
	Start *StartStatus `json:"start,omitempty"`
	// Pull is how far the node's fetch of the image got (state pulling).
	Pull *PullProgress `json:"pull,omitempty"`
	// Error is why the sandbox could not be made (state failed): the
	// fetch's or the start's error as a create waiting for it would have
	// answered.
	Error *Error `json:"error,omitempty"`
}

// ListSandboxesResponse is the body of GET /v1/sandboxes.
type ListSandboxesResponse struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// NextCursor, with ?limit=, is the cursor of the next page; empty on the last.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total, with ?limit=, counts every sandbox the filters match.
	Total *int `json:"total,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec (and the first line of
// exec/stream, and the body of POST .../processes).
type ExecRequest struct {
	// Cmd is the argv; Shell is a string run with /bin/sh -c. Exactly one is set.
	Cmd   []string `json:"cmd,omitempty"`
	Shell string   `json:"shell,omitempty"`
	// Env is added to the sandbox's environment for this process.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory inside the sandbox; default the image config's
	// working_dir, else the user's home ("/root" for root, "/" for a bare UID).
	Cwd string `json:"cwd,omitempty"`
	// User is "root", a user name from the sandbox's /etc/passwd, "UID" or
	// "UID:GID"; default the image config's user, else root.
	User string `json:"user,omitempty"`
	// Stdin is fed to the process (blocking exec and background processes);
	// StdinBase64 is the same for binary input.
	Stdin       string `json:"stdin,omitempty"`
	StdinBase64 string `json:"stdin_base64,omitempty"`
	// TimeoutMs kills the process group after this long; 0 means the server default
	// (blocking exec: 60 s; streaming and background: none).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// MaxOutputBytes caps each of stdout and stderr kept in the result; 0 means 1 MiB.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// OutputEncoding is "utf8" (default; invalid bytes are replaced) or "base64".
	OutputEncoding string `json:"output_encoding,omitempty"`
	// TTY runs the process on a terminal of Cols x Rows (default 80x24) allocated
	// inside the sandbox: stdout and stderr are then one stream (stdout), and
	// Control/StreamInput resizes apply. Streaming exec and background processes.
	TTY  bool `json:"tty,omitempty"`
	Cols int  `json:"cols,omitempty"`
	Rows int  `json:"rows,omitempty"`
	// OpenStdin keeps a background process's standard input (its terminal's
	// input with TTY) open after Stdin, for ProcessInput from any caller; the
	// input ends with ProcessInput.EOF or the process.
	OpenStdin bool `json:"open_stdin,omitempty"`
	// Labels are kept with a background process and returned with it.
	Labels map[string]string `json:"labels,omitempty"`
}

// ProcessInput is input to a running background process started with
// OpenStdin (or a terminal resize): the body of POST .../processes/{pid}/input.
type ProcessInput struct {
	// Data is written to the process's standard input (its terminal with TTY).
	Data []byte `json:"data,omitempty"`
	// EOF closes standard input after Data.
	EOF bool `json:"eof,omitempty"`
	// Resize sets the process's terminal size (TTY only).
	Resize *TermSize `json:"resize,omitempty"`
}

// MaxTermSide is the most columns, and the most rows, a terminal size may have.
const MaxTermSide = 1000

// TermSize is a terminal's size in character cells.
type TermSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ExecResult is the answer of a blocking exec, the final event of a streaming exec, and
// the status of a finished background process.
type ExecResult struct {
	// ExitCode is the exit status, or -1 when the process was killed by a signal.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the process (e.g. "SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// TimedOut says the process was killed because TimeoutMs passed.
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKilled says the kernel's OOM killer ended it at the sandbox's memory limit.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Stdout and Stderr are the captured output (encoded as OutputEncoding says).
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	OutputEncoding  string `json:"output_encoding,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// DurationMs is the wall time from start to exit.
	DurationMs float64 `json:"duration_ms"`
	// Error explains a failure to start the command (e.g. not found: exit code 127).
	Error string `json:"error,omitempty"`
	// Replayed says the result was answered from a trajectory log without running
	// the command again (see TrajectoryHeader).
	Replayed bool `json:"replayed,omitempty"`
}

// StreamEvent is one NDJSON line of POST /v1/sandboxes/{id}/exec/stream's response.
// Type is "started" (PID set; it comes before any output), "stdout" or "stderr"
// (Data set, base64), or "exit" (Result set, with empty Stdout/Stderr since they
// were streamed); "keepalive" (nothing set) comes when the stream was otherwise
// silent for the server's keep-alive interval, and clients ignore it.
//
// POST /v1/sandboxes:run's stream begins with a "sandbox" event (Sandbox
// set: the sandbox it created); with RunRequest.Remove, an exit event whose
// Error is set says the command ended but the sandbox could not be deleted.
type StreamEvent struct {
	Type    string      `json:"type"`
	PID     int         `json:"pid,omitempty"`
	Data    []byte      `json:"data,omitempty"`
	Result  *ExecResult `json:"result,omitempty"`
	Error   *Error      `json:"error,omitempty"`
	Sandbox *Sandbox    `json:"sandbox,omitempty"`
}

// RunRequest is the first NDJSON line of POST /v1/sandboxes:run: create a
// sandbox as Sandbox says, run Exec in it with live I/O (the further lines
// are StreamInput, as in exec/stream), and with Remove delete the sandbox
// once the command is over, however it ends (also when the client goes
// away). Sandbox.Wait false is refused: a run waits for its sandbox.
type RunRequest struct {
	Sandbox CreateSandboxRequest `json:"sandbox"`
	Exec    ExecRequest          `json:"exec"`
	Remove  bool                 `json:"remove,omitempty"`
}

// StreamInput is one NDJSON line a client sends after the ExecRequest line in the
// request body of exec/stream: stdin bytes (base64), end of stdin, or a signal.
type StreamInput struct {
	Stdin  []byte    `json:"stdin,omitempty"`
	EOF    bool      `json:"eof,omitempty"`
	Signal string    `json:"signal,omitempty"`
	Resize *TermSize `json:"resize,omitempty"` // TTY execs only
}

// Process describes a background process started with POST .../processes.
type Process struct {
	ID        string      `json:"id"`
	PID       int         `json:"pid"`
	Cmd       []string    `json:"cmd"`
	Running   bool        `json:"running"`
	StartedAt time.Time   `json:"started_at"`
	Result    *ExecResult `json:"result,omitempty"`
	// TTY: on a terminal; OpenStdin: takes ProcessInput; Labels as started.
	TTY       bool              `json:"tty,omitempty"`
	OpenStdin bool              `json:"open_stdin,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// FollowRequest asks for a background process's output past the offsets the
// caller has read (GET .../processes/{pid}/output): the answer comes as soon as
// there is some, or the process has ended, or WaitMs has passed.
type FollowRequest struct {
	// StdoutOffset and StderrOffset are how much of each log the caller has.
	StdoutOffset int64 `json:"stdout_offset,omitempty"`
	StderrOffset int64 `json:"stderr_offset,omitempty"`
	// WaitMs bounds the wait for output or the end (0: answer at once; at
	// most MaxFollowWaitMs).
	WaitMs int64 `json:"wait_ms,omitempty"`
	// MaxBytes bounds each stream's output in one answer (0: MaxFollowBytes;
	// at most MaxFollowBytes).
	MaxBytes int `json:"max_bytes,omitempty"`
}

const (
	// MaxFollowWaitMs is the longest wait one FollowRequest may ask for.
	MaxFollowWaitMs = 60_000
	// MaxFollowBytes is the most output of one stream one answer carries.
	MaxFollowBytes = 1 << 20
)

// Limit is the most bytes of each stream an answer to r carries.
func (r FollowRequest) Limit() int {
	if r.MaxBytes <= 0 || r.MaxBytes > MaxFollowBytes {
		return MaxFollowBytes
	}
	return r.MaxBytes
}

// ProcessOutput answers a FollowRequest: the output past its offsets and the
// process as it was before that output was read, so that when Ended is set
// the caller has all of it.
type ProcessOutput struct {
	Process Process `json:"process"`
	Stdout  []byte  `json:"stdout,omitempty"`
	Stderr  []byte  `json:"stderr,omitempty"`
	// Ended: the process has ended and Stdout and Stderr reach the end of its
	// logs (nothing more will come).
	Ended bool `json:"ended"`
}

// CodeContext is a context of a sandbox's code interpreter: one kernel,
// whose state its cells share (POST .../code/contexts; code:run's context).
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateCodeContextRequest is the body of POST .../code/contexts.
type CreateCodeContextRequest struct {
	Language string `json:"language,omitempty"` // python (default), javascript, typescript, bash, r, java
	Cwd      string `json:"cwd,omitempty"`      // the kernel's working directory (default /home/user)
}

// ListCodeContextsResponse is the body of GET .../code/contexts.
type ListCodeContextsResponse struct {
	Contexts []CodeContext `json:"contexts"`
}

// ListProcessesResponse is the body of GET .../processes.
type ListProcessesResponse struct {
	Processes []Process `json:"processes"`
}

// KillRequest is the body of POST .../processes/{pid}/kill.
type KillRequest struct {
	Signal string `json:"signal,omitempty"` // default SIGKILL
}

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	Type    string    `json:"type"` // file, dir, symlink, other
	ModTime time.Time `json:"mod_time"`
	Link    string    `json:"link,omitempty"` // symlink target
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
	// Xattrs are the file's extended attributes in the "user." namespace, by
	// full name (e.g. "user.e2b.author"); absent when it has none or the
	// backend does not report them.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// ListFilesResponse is the body of GET .../files/list.
type ListFilesResponse struct {
	Files []FileInfo `json:"files"`
}

// MkdirRequest is the body of POST .../files/mkdir.
type MkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	Mode    uint32 `json:"mode,omitempty"` // default 0755
}

// Info is the body of GET /v1/info.
type Info struct {
	Version  string   `json:"version"`
	Node     string   `json:"node"`
	Backends []string `json:"backends"`
	Images   []string `json:"images"`
	Cgroup   string   `json:"cgroup,omitempty"` // v1 or v2; none when the node's backends use no cgroups
	QoS      *QoSInfo `json:"qos,omitempty"`
	// VM describes the microvm backend (KVM or TCG, and why) when it is there.
	VM *VMInfo `json:"vm,omitempty"`
	// Capabilities are the optional operations each backend serves, by backend
	// (Cap* values), so a client can tell what is supported without trying it;
	// the others answer not_implemented.
	Capabilities map[string][]string `json:"capabilities,omitempty"`
	// Services are the groups of operations this server offers beyond
	// sandboxes, processes and files (Service* values); the others answer
	// not_implemented.
	Services []string `json:"services,omitempty"`
	// Host lists the host features dsec uses and whether this node has each
	// one (what `dsec doctor` prints).
	Host []HostFeature `json:"host,omitempty"`
}

// HostFeature is one host feature dsec uses (Info.Host, `dsec doctor`).
type HostFeature struct {
	// Name is e.g. cgroup-v2, erofs-file-backed, fuse-resend, nftables, kvm.
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Required is set when dsec cannot run sandboxes without it.
	Required bool `json:"required,omitempty"`
	// Detail is what the probe found (the kernel release, the controllers).
	Detail string `json:"detail"`
	// Degraded is what does not work, or works worse, without the feature.
	Degraded string `json:"degraded"`
	// Controllers are the cgroup controllers found (the cgroup features).
	Controllers []string `json:"controllers,omitempty"`
}

// Backend capabilities (Info.Capabilities).
const (
	CapPause = "pause"
	CapFork  = "fork"
	// CapPauseFilesystem: pause without memory (PauseRequest.Memory false).
	CapPauseFilesystem = "pause_filesystem"
	CapCommit          = "commit"
	CapScreenshot      = "screenshot"
	CapInput           = "input"
	CapTTY             = "tty"
)

// Service groups (Info.Services).
const (
	ServiceFnCall       = "fncall"
	ServiceImages       = "images"
	ServiceTrajectories = "trajectories"
	ServiceNodes        = "nodes"
	ServiceProjects     = "projects"
)

// Image is the body of GET /v1/images/{name} (and an item of GET /v1/images): a
// directory image, or a layered environment with its layers' accounting on this
// node.
type Image struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "directory" or "layered"
	Default bool   `json:"default,omitempty"`
	// Ref and Digest: an image pulled from a registry, its normalised
	// reference and the digest that reference resolved to on this node.
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"`
	// LastUsed is when a pull or a create last used a pulled image on this
	// node (the image cache evicts the least recently used first).
	LastUsed *time.Time `json:"last_used,omitempty"`
	// Layers of a layered environment, base first.
	Layers []ImageLayer `json:"layers,omitempty"`
	// Size and BytesFetched add up the layers: bytes fetched / size is how much of
	// the environment this node has read from the blob store.
	Size         int64 `json:"size,omitempty"`
	BytesFetched int64 `json:"bytes_fetched,omitempty"`
	// Config is the image's process defaults (from the OCI image config it was
	// built from, or image.json); nil: none, execs get dsec's defaults.
	Config *ImageConfig `json:"config,omitempty"`
	// Nodes is set by a cluster's API server: each node that has the image,
	// with the bytes it fetched. BytesFetched is then left out, and the
	// layers' counters (bytes fetched, cache hits and misses, sandboxes) add
	// up the nodes'.
	Nodes []ImageNode `json:"nodes,omitempty"`
}

// PruneImagesResult is the body of POST /v1/images/prune's answer: the
// pulled images removed from the node's cache, and those kept because a
// sandbox uses them.
type PruneImagesResult struct {
	Removed []Image `json:"removed"`
	// InUse are the pulled images kept: a sandbox uses each.
	InUse []Image `json:"in_use"`
	// Bytes is the size of the removed images (layers they shared with a
	// kept image are counted but kept).
	Bytes int64 `json:"bytes"`
	// BuildCache is what left the node's Dockerfile build cache (absent
	// where there is none, e.g. a cluster's API server).
	BuildCache *BuildCachePruned `json:"build_cache,omitempty"`
}

// BuildCachePruned is what a prune removed from the Dockerfile build cache.
type BuildCachePruned struct {
	// Entries counts the cached steps removed.
	Entries int `json:"entries"`
	// Bytes of the layer blobs deleted (layers an image also has stay).
	Bytes int64 `json:"bytes"`
	// Kept counts the cached steps a build in progress or a sandbox uses.
	Kept int `json:"kept"`
}

// ImageNode is one node's copy of an image (Image.Nodes).
type ImageNode struct {
	Node         string `json:"node"`
	BytesFetched int64  `json:"bytes_fetched"`
	// MountedLayers counts the image's layers this node has mounted.
	MountedLayers int `json:"mounted_layers"`
}

// ImageConfig is the part of an OCI image config dsec keeps and honours. Env
// (KEY=VALUE) is the base environment of every exec (its PATH replaces the
// default PATH), WorkingDir the default cwd, User the default user; a request's
// env, cwd and user override them. Entrypoint and Cmd are recorded and shown.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// ExposedPorts ("8080/tcp") and Labels are kept from the image config.
	ExposedPorts []string          `json:"exposed_ports,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// ComposeImageRequest is the body of POST /v1/images: an environment from layers
// already built into the node's blob store (`dsec image build`), by name or digest.
type ComposeImageRequest struct {
	Name      string   `json:"name"`
	Base      string   `json:"base"`
	Toolkits  []string `json:"toolkits,omitempty"` // bottom to top
	Workspace string   `json:"workspace,omitempty"`
}

// RecordedLayer is one layer POST /v1/images/{name}/record stored a prefetch
// list for: the chunks this node's sandboxes read from it.
type RecordedLayer struct {
	Role   string `json:"role"`
	Digest string `json:"digest"`
	Chunks int    `json:"chunks"`
	Bytes  int64  `json:"bytes"`
	List   string `json:"prefetch_list"`
}

// ImageLayer is one layer of a layered environment and its accounting on this node
// (zero until the node first mounts it).
type ImageLayer struct {
	Digest       string `json:"digest"`
	Role         string `json:"role"` // base, toolkit or workspace
	BlobStore    string `json:"blob_store"`
	Size         int64  `json:"size"`
	BytesFetched int64  `json:"bytes_fetched"`
	ChunkSize    int64  `json:"chunk_size,omitempty"`
	CacheHits    int64  `json:"cache_hits"`
	CacheMisses  int64  `json:"cache_misses"`
	Mounted      bool   `json:"mounted"`
	Sandboxes    int    `json:"sandboxes"` // sandboxes holding the layer
	// PrefetchList is the digest of the layer's recorded access list, which a node
	// prefetches when it first mounts the layer; Prefetched counts those chunks.
	PrefetchList string `json:"prefetch_list,omitempty"`
	Prefetched   int64  `json:"prefetched_chunks"`
}
