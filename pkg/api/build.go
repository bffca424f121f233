package api

import "io"

// BuildImageRequest is a Dockerfile build (POST /v1/images:build, query
// parameters; the body is the build context as a tar stream, plain or gzip).
type BuildImageRequest struct {
	// Name is the environment the build writes (replaced if it exists).
	Name string `json:"name"`
	// Dockerfile is the Dockerfile's path inside the context (default
	// "Dockerfile").
	Dockerfile string `json:"dockerfile,omitempty"`
	// BuildArgs set ARG values (--build-arg KEY=VALUE).
	BuildArgs map[string]string `json:"build_args,omitempty"`
	// Target builds up to this stage (default: the last).
	Target string `json:"target,omitempty"`
	// RunTimeoutMs bounds each RUN (default 30 minutes).
	RunTimeoutMs int64 `json:"run_timeout_ms,omitempty"`
	// CPU and MemoryBytes are the limits of the sandboxes RUN steps run in
	// (0: a sandbox's defaults).
	CPU         float64 `json:"cpu,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	// Output, when set, receives each RUN's output (stdout and stderr) as
	// the command writes it, while the build runs: an E2B template build's
	// logs, the Go client's streamed build (its lines, from the server's
	// "log" events), the node RPC relaying a node's build to an API server.
	// It is not part of the request's JSON.
	Output io.Writer `json:"-"`
	// Network is the egress policy of the RUN steps' sandboxes (nil, the
	// default: none, loopback only). COPY and ADD never need one.
	Network *NetworkPolicy `json:"network,omitempty"`
	// RegistryAuth gives credentials by registry host (HOST[:PORT] as the
	// reference names it; docker.io for Docker Hub) for the build's FROM
	// pulls only, in place of the node's: they are never stored with the
	// image or its layers, and never logged.
	RegistryAuth map[string]RegistryAuth `json:"registry_auth,omitempty"`
}

// RegistryAuth is a user name and password for one registry (basic auth, or
// the registry's token flow with them).
type RegistryAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// String names the user only: the password is never printed.
func (a RegistryAuth) String() string { return "registry auth for " + a.Username }

// GoString is String, so %#v shows no password either.
func (a RegistryAuth) GoString() string { return a.String() }

// BuildStep is one instruction of a build as it ran.
type BuildStep struct {
	Stage       int    `json:"stage"`
	Line        int    `json:"line"`
	Instruction string `json:"instruction"`
	// Cached says the step's layer came from the build cache (RUN, COPY, ADD).
	Cached bool `json:"cached,omitempty"`
	// Layer is the digest of the layer the step made (RUN, COPY, ADD).
	Layer  string  `json:"layer,omitempty"`
	Millis float64 `json:"ms"`
	// Warning says what was recorded and ignored (VOLUME, HEALTHCHECK, ...).
	Warning string `json:"warning,omitempty"`
}

// BuildImageResult is what a build made.
type BuildImageResult struct {
	Image     Image       `json:"image"`
	Steps     []BuildStep `json:"steps"`
	CacheHits int         `json:"cache_hits"`
	// LayerSteps counts the steps that make a layer (RUN, COPY, ADD, and a
	// WORKDIR no later step created); CacheHits of them came from the cache.
	LayerSteps int     `json:"layer_steps"`
	Millis     float64 `json:"ms"`
}

// BuildEvent is one NDJSON line of a streamed build (POST /v1/images:build
// with Accept: application/x-ndjson or stream=true): "log" carries a line of
// the RUN steps' output as the build writes it, "keepalive" nothing, and the
// last line is "result" (Result) or "error" (Error, with the status the
// answer would have had).
type BuildEvent struct {
	Type   string            `json:"type"`
	Log    string            `json:"log,omitempty"`
	Result *BuildImageResult `json:"result,omitempty"`
	Error  *Error            `json:"error,omitempty"`
}
