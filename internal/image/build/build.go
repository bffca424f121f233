// Package build builds environments from Dockerfiles. The Dockerfile is
// parsed by moby buildkit's parser and instructions packages (never by hand);
// the builder then runs it with the pieces dsec already has: FROM resolves a
// local environment, a directory image or a registry reference (pulled as a
// create would); RUN executes in a container sandbox of the image built so
// far; COPY and ADD extract local context files into such a sandbox through
// its file system; each of those steps is a commit of the sandbox's writable
// layer, so it becomes one EROFS layer. ENV, ARG, WORKDIR, USER, SHELL, CMD,
// ENTRYPOINT, EXPOSE and LABEL change the image config the result carries, so
// a create of the built environment honours them as it does for a pulled image.
//
// Cache: each layer step's result is an environment named
// "buildcache-<key>", where the key chains the base image's identity, every
// instruction so far (as written and with its ARG/ENV values) and the digests
// of the context files a COPY reads. A second identical build finds every
// step there and creates no sandbox; a changed line redoes only what follows.
//
// Errors are the caller's input (invalid_argument, with the Dockerfile line):
// a syntax error, an unsupported instruction or flag, a context file missing
// or outside the context, a RUN that fails (its exit code and output tail).
// A failed build writes no environment of the requested name and deletes every
// sandbox it created; steps that succeeded before stay in the cache.
package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// CachePrefix starts the names of the environments that hold cached steps.
const CachePrefix = "buildcache-"

// DefaultRunTimeout bounds a RUN unless the request says otherwise.
const DefaultRunTimeout = 30 * time.Minute

// Sandboxes is what a build needs of the node's session service.
type Sandboxes interface {
	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error)
	FS(ctx context.Context, id string) (session.FS, error)
	Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error)
}

// Builder builds Dockerfiles on one node.
type Builder struct {
	Sandboxes Sandboxes
	// Envs holds the cache entries and the result.
	Envs *envstore.Store
	// Resolve finds a FROM image (image.Store.ResolveContext).
	Resolve func(ctx context.Context, name string) (image.Image, error)
	// BlobLayers turns an image's directory layers into blobs
	// (commit.Packer.BlobLayers), for a result with no layer step of its own.
	BlobLayers func(ctx context.Context, img image.Image) ([]image.Layer, error)
	// Backend runs the build's sandboxes (default "container").
	Backend string
	// TempDir holds the trees of stages FROM scratch and their layers while
	// they are packed (default: os.TempDir()).
	TempDir string
	Log     *slog.Logger

	// CacheBudget is the most bytes of layers only the build cache holds
	// (cache.go; 0: no limit): a build that leaves the cache over it evicts
	// the least recently used entries no build or sandbox uses.
	CacheBudget int64
	// CacheDir keeps the cache entries' last-use marks (""; their creation
	// time stands for it).
	CacheDir string
	// HeldBlobs returns the blob digests held outside the environment store
	// (the pulled images'); the cache never deletes those.
	HeldBlobs func(ctx context.Context) (map[string]bool, error)
	// LayersInUse returns the layer digests the node's sandboxes run on
	// (agent.Manager.LayerDigestsInUse).
	LayersInUse func() map[string]bool
	// SharedBlobs says other nodes read Envs.Blobs (a shared blob store,
	// whose layers their sandboxes may run on unseen by this node): eviction
	// and prune then remove cache entries but never delete a blob.
	SharedBlobs bool

	cacheMu sync.Mutex
	pinned  map[string]int // cache entries builds in progress stand on
}

// Request is one build.
type Request struct {
	api.BuildImageRequest
	// Dockerfile's contents and the context directory on this host.
	DockerfileText []byte
	ContextDir     string
	// Progress, if set, gets one line per step as it ends.
	Progress io.Writer
}

// lineError is an input error at a Dockerfile line.
func lineError(line int, format string, args ...any) error {
	return errdefs.Invalid("Dockerfile line %d: %s", line, fmt.Sprintf(format, args...))
}

// Build runs req and writes environment req.Name.
func (b *Builder) Build(ctx context.Context, req Request) (api.BuildImageResult, error) {
	start := time.Now()
	var res api.BuildImageResult
	if !image.ValidName.MatchString(req.Name) || strings.HasPrefix(req.Name, CachePrefix) {
		return res, errdefs.Invalid("invalid image name %q (lowercase letters, digits, . _ -; not %s*)", req.Name, CachePrefix)
	}
	if _, err := b.Envs.Get(ctx, req.Name); errdefs.Is(err, api.CodeNotFound) {
		if _, rerr := b.Resolve(ctx, req.Name); rerr == nil {
			return res, errdefs.New(api.CodeAlreadyExists, "%q is a directory image; build into another name", req.Name)
		}
	}
	stages, metaArgs, err := parse(req.DockerfileText)
	if err != nil {
		return res, err
	}
	last := len(stages) - 1
	if req.Target != "" {
		i, ok := instructions.HasStage(stages, req.Target)
		if !ok {
			return res, errdefs.Invalid("target stage %q not found in the Dockerfile", req.Target)
		}
		last = i
	}
	r := &run{b: b, req: req, res: &res, built: map[string]*state{}}
	defer r.removeTrees()
	defer func() { // a failed build's finished steps count too
		r.unpinAll()
		if _, err := b.Evict(context.WithoutCancel(ctx)); err != nil {
			b.log().Warn("build cache eviction", "err", err)
		}
	}()
	if r.meta, err = r.metaArgs(metaArgs); err != nil {
		return res, err
	}
	var st *state
	for i := 0; i <= last; i++ {
		if st, err = r.stage(ctx, i, &stages[i]); err != nil {
			return res, err
		}
		if stages[i].Name != "" {
			r.built[strings.ToLower(stages[i].Name)] = st
		}
		r.order = append(r.order, st)
	}
	img, err := r.finish(ctx, st)
	if err != nil {
		return res, err
	}
	res.Image = img
	res.Millis = ms(time.Since(start))
	b.log().Info("built image", "name", req.Name, "steps", len(res.Steps), "layer_steps", res.LayerSteps, "cache_hits", res.CacheHits, "ms", res.Millis)
	return res, nil
}

func (b *Builder) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.New(slog.DiscardHandler)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// parse parses a Dockerfile into stages and the ARGs before the first FROM.
func parse(text []byte) ([]instructions.Stage, []instructions.ArgCommand, error) {
	ast, err := parser.Parse(bytes.NewReader(text))
	if err != nil {
		return nil, nil, parseErr(err, 0)
	}
	var stages []instructions.Stage
	var meta []instructions.ArgCommand
	for _, n := range ast.AST.Children {
		cmd, err := instructions.ParseInstruction(n)
		if err != nil {
			return nil, nil, parseErr(err, n.StartLine)
		}
		switch c := cmd.(type) {
		case *instructions.Stage:
			stages = append(stages, *c)
		case *instructions.ArgCommand:
			if len(stages) == 0 {
				meta = append(meta, *c)
				continue
			}
			stages[len(stages)-1].AddCommand(c)
		case instructions.Command:
			if len(stages) == 0 {
				return nil, nil, lineError(n.StartLine, "%s before the first FROM", strings.ToUpper(c.Name()))
			}
			stages[len(stages)-1].AddCommand(c)
		default:
			return nil, nil, lineError(n.StartLine, "%T is not an instruction", cmd)
		}
	}
	if len(stages) == 0 {
		return nil, nil, errdefs.Invalid("Dockerfile: no FROM instruction")
	}
	return stages, meta, nil
}

// parseErr is a parser error as an input error with its line.
func parseErr(err error, line int) error {
	var le *parser.LocationError
	if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
		line = le.Locations[0][0].Start.Line
	}
	var ue *instructions.UnknownInstructionError
	if errors.As(err, &ue) {
		return lineError(line, "unknown instruction %s", ue.Instruction)
	}
	msg := err.Error()
	if le != nil {
		msg = le.Unwrap().Error()
	}
	if line == 0 {
		return errdefs.Invalid("Dockerfile: %s", msg)
	}
	return lineError(line, "%s", msg)
}

// state is a stage as built so far.
type state struct {
	// from names the image a sandbox of this state is created from: the FROM
	// image (pinned to its digest if pulled) or the cache environment of the
	// last layer step.
	from   string
	layers []image.Layer
	cfg    image.Config
	key    [32]byte
	shell  []string
	args   map[string]string // ARG values in scope
	// mkdir is a WORKDIR (at line mkdirLine) no layer step has created yet;
	// its missing directories are created owned by mkdirUser (the USER then).
	mkdir     string
	mkdirLine int
	mkdirUser string
	cmdSet    bool
	// tree is the host directory holding the whole file system of a stage
	// FROM scratch (scratch.go); "" for a stage on an image.
	tree string
	// stage names the stage in errors: `stage 1 "dist"`, or `stage 0`.
	stage string
}

// env returns the build-time environment: ARGs under the image's ENV.
func (s *state) env() []string {
	m := maps.Clone(s.args)
	for _, kv := range s.cfg.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// chain returns the cache key after a step described by parts (expanded, so
// the ARG values a step reads are in them), with the state's config. ARGs
// themselves are not: as in Docker, a changed build arg redoes the RUNs (whose
// environment has it) and what follows, not a COPY before them.
func (s *state) chain(parts ...string) [32]byte {
	h := sha256.New()
	h.Write(s.key[:])
	cfg, _ := json.Marshal(struct {
		C  image.Config
		Sh []string
		M  string
		MU string
	}{s.cfg, s.shell, s.mkdir, s.mkdirUser})
	h.Write(cfg)
	for _, p := range parts {
		fmt.Fprintf(h, "\x00%d:%s", len(p), p)
	}
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

func cacheName(k [32]byte) string { return CachePrefix + hex.EncodeToString(k[:16]) }

// run is one build in progress.
type run struct {
	b     *Builder
	req   Request
	res   *api.BuildImageResult
	meta  map[string]string
	built map[string]*state // finished stages by lower-case name
	order []*state          // finished stages in order
	trees []string          // scratch stages' host trees, removed when the build ends
	pins  []string          // cache entries this build pinned
}

// metaArgs evaluates the ARGs before the first FROM.
func (r *run) metaArgs(args []instructions.ArgCommand) (map[string]string, error) {
	meta := map[string]string{}
	for _, a := range args {
		for _, kv := range a.Args {
			v, err := r.expand(kv.ValueString(), mapEnv(meta), a.Location())
			if err != nil {
				return nil, err
			}
			if bv, ok := r.req.BuildArgs[kv.Key]; ok {
				v = bv
			} else if kv.Value == nil {
				continue
			}
			meta[kv.Key] = v
		}
	}
	return meta, nil
}

func mapEnv(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func lineOf(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

func (r *run) expand(word string, env []string, loc []parser.Range) (string, error) {
	out, _, err := shell.NewLex('\\').ProcessWord(word, shell.EnvsFromSlice(env))
	if err != nil {
		return "", lineError(lineOf(loc), "%v", err)
	}
	return out, nil
}

// from starts a stage's state from its FROM image.
func (r *run) from(ctx context.Context, idx int, s *instructions.Stage) (*state, error) {
	line := lineOf(s.Location)
	if s.Platform != "" {
		return nil, lineError(line, "FROM --platform is not supported (images are built for this node's platform)")
	}
	name, err := r.expand(s.BaseName, mapEnv(r.meta), s.Location)
	if err != nil {
		return nil, err
	}
	if prev, ok := r.built[strings.ToLower(name)]; ok {
		st := *prev
		st.args, st.cmdSet = map[string]string{}, false
		st.cfg = *cloneConfig(&prev.cfg)
		st.key = prev.chain("FROM stage", name)
		if prev.tree != "" { // a stage's tree is its own
			if st.tree, err = r.copyTree(ctx, prev.tree); err != nil {
				return nil, fmt.Errorf("Dockerfile line %d: FROM %s: %w", line, name, err)
			}
		}
		return &st, nil
	}
	if name == "scratch" {
		return r.fromScratch(ctx, line)
	}
	img, err := r.b.Resolve(r.withRegistryAuth(ctx), name)
	if err != nil {
		return nil, fmt.Errorf("Dockerfile line %d: FROM %s: %w", line, name, err)
	}
	st := &state{from: pinned(name, img), layers: img.Layers, args: map[string]string{}, shell: []string{"/bin/sh", "-c"}}
	if img.Config != nil {
		st.cfg = *cloneConfig(img.Config)
	}
	// The base's identity: a pulled image's digest, else its layers and config.
	id, _ := json.Marshal(struct {
		Digest string
		Layers []image.Layer
		Config *image.Config
	}{img.Digest, img.Layers, img.Config})
	st.key = st.chain("FROM", string(id))
	return st, nil
}

// pinned names the FROM image name resolved to for the step sandboxes: a
// registry reference by the digest it resolved to, which the node holds now
// (a tag could move meanwhile, and resolving it again would need the
// registry and the build's credentials), any other name as it is.
func pinned(name string, img image.Image) string {
	if img.Digest == "" || !registry.IsReference(name) {
		return name
	}
	ref, err := registry.Parse(name)
	if err != nil {
		return name
	}
	return ref.Context().Digest(img.Digest).String()
}

// withRegistryAuth is ctx carrying the request's registry credentials, for
// a FROM's pull (and nothing else the build does).
func (r *run) withRegistryAuth(ctx context.Context) context.Context {
	return registry.WithAuth(ctx, r.req.RegistryAuth)
}

func cloneConfig(c *image.Config) *image.Config {
	out := *c
	out.Env = slices.Clone(c.Env)
	out.Entrypoint = slices.Clone(c.Entrypoint)
	out.Cmd = slices.Clone(c.Cmd)
	out.ExposedPorts = slices.Clone(c.ExposedPorts)
	out.Labels = maps.Clone(c.Labels)
	return &out
}

// stage builds stage idx.
func (r *run) stage(ctx context.Context, idx int, s *instructions.Stage) (*state, error) {
	t0 := time.Now()
	st, err := r.from(ctx, idx, s)
	if err != nil {
		return nil, err
	}
	st.stage = fmt.Sprintf("stage %d", idx)
	if s.Name != "" {
		st.stage += fmt.Sprintf(" %q", s.Name)
	}
	r.record(api.BuildStep{Stage: idx, Line: lineOf(s.Location), Instruction: s.SourceCode, Millis: ms(time.Since(t0))})
	for _, c := range s.Commands {
		t0 := time.Now()
		step := api.BuildStep{Stage: idx, Line: lineOf(c.Location()), Instruction: fmt.Sprint(c)}
		if err := r.instruction(ctx, st, c, &step); err != nil {
			return nil, err
		}
		step.Millis = ms(time.Since(t0))
		r.record(step)
	}
	return st, nil
}

func (r *run) record(step api.BuildStep) {
	r.res.Steps = append(r.res.Steps, step)
	if r.req.Progress != nil {
		fmt.Fprintln(r.req.Progress, StepLine(len(r.res.Steps), step))
	}
}

// StepLine is step n (1-based) as a progress line.
func StepLine(n int, step api.BuildStep) string {
	note := ""
	switch {
	case step.Cached:
		note = " CACHED"
	case step.Warning != "":
		note = " (" + step.Warning + ")"
	}
	return fmt.Sprintf("#%d line %d: %s%s %.1fms", n, step.Line, step.Instruction, note, step.Millis)
}

// instruction applies one instruction to st.
func (r *run) instruction(ctx context.Context, st *state, c instructions.Command, step *api.BuildStep) error {
	line := step.Line
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := c.(*instructions.RunCommand); !isRun {
			env := st.env()
			if err := e.Expand(func(w string) (string, error) { return r.expand(w, env, c.Location()) }); err != nil {
				return err
			}
		}
	}
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			st.cfg.Env = image.Merge(&image.Config{Env: st.cfg.Env}, &image.Config{Env: []string{kv.Key + "=" + kv.Value}}).Env
		}
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			v, ok := r.req.BuildArgs[kv.Key]
			if !ok {
				v, ok = r.meta[kv.Key]
			}
			if !ok && kv.Value != nil {
				v, ok = *kv.Value, true
			}
			if ok {
				st.args[kv.Key] = v
			}
		}
	case *instructions.WorkdirCommand:
		p := joinPath(st.workdir(), c.Path)
		st.cfg.WorkingDir, st.mkdir, st.mkdirLine, st.mkdirUser = p, p, line, st.cfg.User
	case *instructions.UserCommand:
		st.cfg.User = c.User
	case *instructions.ShellCommand:
		st.shell = slices.Clone(c.Shell)
	case *instructions.CmdCommand:
		if len(c.Files) > 0 {
			return lineError(line, "CMD with a heredoc is not supported")
		}
		st.cfg.Cmd, st.cmdSet = st.argv(c.ShellDependantCmdLine), true
	case *instructions.EntrypointCommand:
		if len(c.Files) > 0 {
			return lineError(line, "ENTRYPOINT with a heredoc is not supported")
		}
		st.cfg.Entrypoint = st.argv(c.ShellDependantCmdLine)
		if !st.cmdSet { // Docker: an ENTRYPOINT resets an inherited CMD
			st.cfg.Cmd = nil
		}
	case *instructions.ExposeCommand:
		for _, p := range c.Ports {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			if !slices.Contains(st.cfg.ExposedPorts, p) {
				st.cfg.ExposedPorts = append(st.cfg.ExposedPorts, p)
			}
		}
	case *instructions.LabelCommand:
		if st.cfg.Labels == nil {
			st.cfg.Labels = map[string]string{}
		}
		for _, kv := range c.Labels {
			st.cfg.Labels[kv.Key] = kv.Value
		}
	case *instructions.MaintainerCommand:
		if st.cfg.Labels == nil {
			st.cfg.Labels = map[string]string{}
		}
		st.cfg.Labels["maintainer"] = c.Maintainer
	case *instructions.VolumeCommand:
		step.Warning = "VOLUME recorded and ignored: a sandbox's file system is one writable tree"
	case *instructions.StopSignalCommand:
		step.Warning = "STOPSIGNAL ignored: dsec stops sandboxes as a whole"
	case *instructions.HealthCheckCommand:
		step.Warning = "HEALTHCHECK ignored: use a create's readiness check"
	case *instructions.OnbuildCommand:
		return lineError(line, "ONBUILD is not supported")
	case *instructions.RunCommand:
		return r.runStep(ctx, st, c, step)
	case *instructions.CopyCommand:
		spec := copySpec{cmd: "COPY", sd: c.SourcesAndDest, chown: c.Chown, chmod: c.Chmod, exclude: c.ExcludePatterns, parents: c.Parents}
		if c.From != "" {
			return r.copyFromStage(ctx, st, spec, c.From, step)
		}
		return r.copyStep(ctx, st, spec, step)
	case *instructions.AddCommand:
		if c.Checksum != "" || c.KeepGitDir != nil {
			return lineError(line, "ADD --checksum and --keep-git-dir are not supported (no remote sources)")
		}
		return r.copyStep(ctx, st, copySpec{cmd: "ADD", sd: c.SourcesAndDest, chown: c.Chown, chmod: c.Chmod, exclude: c.ExcludePatterns, add: true}, step)
	default:
		return lineError(line, "%s is not supported", strings.ToUpper(c.Name()))
	}
	return nil
}

// argv is a CMD/ENTRYPOINT/RUN command line as an argv: the shell form goes
// through the stage's SHELL.
func (s *state) argv(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return append(slices.Clone(s.shell), strings.Join(c.CmdLine, " "))
	}
	return slices.Clone(c.CmdLine)
}

func (s *state) workdir() string {
	if s.cfg.WorkingDir == "" {
		return "/"
	}
	return s.cfg.WorkingDir
}

// runStep runs a RUN in a sandbox of st and commits it.
func (r *run) runStep(ctx context.Context, st *state, c *instructions.RunCommand, step *api.BuildStep) error {
	line := step.Line
	if len(c.FlagsUsed) > 0 {
		return lineError(line, "RUN --%s is not supported", c.FlagsUsed[0])
	}
	if len(c.Files) > 0 {
		return lineError(line, "RUN with a heredoc is not supported")
	}
	argv := st.argv(c.ShellDependantCmdLine)
	if len(argv) == 0 {
		return lineError(line, "RUN: no command")
	}
	env := map[string]string{}
	for _, kv := range st.env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	args, _ := json.Marshal(struct {
		Argv []string
		Env  map[string]string
	}{argv, env})
	key := st.chain("RUN", string(args))
	timeout := DefaultRunTimeout
	if r.req.RunTimeoutMs > 0 {
		timeout = time.Duration(r.req.RunTimeoutMs) * time.Millisecond
	}
	if st.tree != "" {
		return lineError(line, "RUN in %s, which is FROM scratch: it has no shell or program to run (only what COPY/ADD put there); RUN in a stage FROM an image and COPY --from it", st.stage)
	}
	return r.layerStepWith(ctx, st, key, step, r.req.Network, func(ctx context.Context, w workspace) error {
		res, err := r.exec(ctx, w.id, api.ExecRequest{Cmd: argv, Env: env, Cwd: st.workdir(), User: st.cfg.User,
			TimeoutMs: timeout.Milliseconds()})
		if err != nil {
			return fmt.Errorf("Dockerfile line %d: RUN: %w", line, err)
		}
		if res.ExitCode != 0 || res.TimedOut {
			how := fmt.Sprintf("exited with code %d", res.ExitCode)
			if res.TimedOut {
				how = fmt.Sprintf("timed out after %s", timeout)
			} else if res.Signal != "" {
				how = "was killed by " + res.Signal
			}
			hint := ""
			if r.req.Network == nil {
				hint = "\n(RUN steps of this build have no network; dsec image build --network POLICY gives them egress)"
			}
			return errdefs.New(api.CodeInvalidArgument, "Dockerfile line %d: %s %s:\n%s%s", line, c.String(), how,
				tail(res.Stdout+res.Stderr, runTail), hint)
		}
		return nil
	})
}

// streamer is what the build needs of Sandboxes to stream a RUN's output
// (req.Output): the node's session service has it.
type streamer interface {
	ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error)
}

// runTail is how much of a RUN's output a failed step's error quotes.
const runTail = 2048

// exec runs a RUN's command: with req.Output set, its output goes there as
// it is written (the result keeps the tail an error quotes).
func (r *run) exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	s, ok := r.b.Sandboxes.(streamer)
	if r.req.Output == nil || !ok {
		return r.b.Sandboxes.Exec(ctx, id, req)
	}
	w := &tailWriter{out: r.req.Output}
	res, err := s.ExecStream(ctx, id, req, session.Stream{Stdout: w, Stderr: w})
	res.Stdout, res.Stderr = w.String(), ""
	return res, err
}

// tailWriter passes what stdout and stderr write on to out, one write at a
// time, keeping the last 2*runTail bytes.
type tailWriter struct {
	mu   sync.Mutex
	out  io.Writer
	tail []byte
}

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tail = append(t.tail, b...)
	if n := len(t.tail); n > 2*runTail {
		t.tail = append(t.tail[:0], t.tail[n-2*runTail:]...)
	}
	_, _ = t.out.Write(b) // a slow or failed log reader does not fail the RUN
	return len(b), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.tail)
}

// tail returns the last n bytes of s, from a line start where it can.
func tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return "..." + "\n" + s
}

// layerStep makes st's next layer: the cache's if environment cacheName(key)
// holds it, else a sandbox of st that fn changes, committed under that name.
func (r *run) layerStep(ctx context.Context, st *state, key [32]byte, step *api.BuildStep, fn func(ctx context.Context, w workspace) error) error {
	return r.layerStepWith(ctx, st, key, step, nil, fn)
}

// layerStepWith is layerStep whose sandbox has egress policy network (nil:
// loopback only).
func (r *run) layerStepWith(ctx context.Context, st *state, key [32]byte, step *api.BuildStep, network *api.NetworkPolicy, fn func(ctx context.Context, w workspace) error) error {
	if st.tree != "" {
		return r.treeStep(ctx, st, key, step, fn)
	}
	name := cacheName(key)
	r.res.LayerSteps++
	r.pin(name)
	if m, ok := r.cached(ctx, name); ok {
		r.res.CacheHits++
		step.Cached = true
		r.b.touch(name)
		advance(st, key, name, m, step)
		return nil
	}
	// The step's image is the base pinned to its digest: the build's own
	// registry credentials go with it (an image fetched with them is checked
	// at the registry for each create by digest).
	sb, err := r.b.Sandboxes.Create(ctx, api.CreateSandboxRequest{Backend: r.backend(), Image: st.from,
		CPU: r.req.CPU, MemoryBytes: r.req.MemoryBytes, Labels: map[string]string{"dsec.build": r.req.Name}, Network: network,
		RegistryAuth: r.req.RegistryAuth})
	if err != nil {
		return fmt.Errorf("Dockerfile line %d: sandbox for the step: %w", step.Line, err)
	}
	defer r.deleteSandbox(ctx, sb.ID)
	if err := r.mkWorkdir(ctx, st, r.sandboxWorkspace(sb.ID), step.Line); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(ctx, r.sandboxWorkspace(sb.ID)); err != nil {
			return err
		}
	}
	_, err = r.b.Sandboxes.Commit(ctx, sb.ID, api.CommitRequest{Name: name, NoDefaultExclude: true})
	if err != nil && !errdefs.Is(err, api.CodeAlreadyExists) { // already there: a concurrent identical build
		return fmt.Errorf("Dockerfile line %d: commit the step: %w", step.Line, err)
	}
	m, err := r.b.Envs.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("Dockerfile line %d: read the committed step: %w", step.Line, err)
	}
	r.b.touch(name)
	advance(st, key, name, m, step)
	return nil
}

// advance moves st to the layer step's result m (cache environment name).
func advance(st *state, key [32]byte, name string, m image.Manifest, step *api.BuildStep) {
	st.key, st.from, st.mkdir = key, name, ""
	st.layers = slices.Clone(m.Layers)
	if n := len(st.layers); n > 0 {
		step.Layer = st.layers[n-1].Digest
	}
}

// deleteSandbox deletes a build's sandbox, even once ctx has ended.
func (r *run) deleteSandbox(ctx context.Context, id string) {
	if err := r.b.Sandboxes.Delete(context.WithoutCancel(ctx), id); err != nil && !errdefs.Is(err, api.CodeNotFound) {
		r.b.log().Warn("delete build sandbox", "id", id, "err", err)
	}
}

func (r *run) backend() string {
	if r.b.Backend != "" {
		return r.b.Backend
	}
	return "container"
}

// cached returns the cache environment name if it and all its blobs exist.
func (r *run) cached(ctx context.Context, name string) (image.Manifest, bool) {
	m, err := r.b.Envs.Get(ctx, name)
	if err != nil {
		return m, false
	}
	if r.b.Envs.Blobs != nil {
		for _, l := range m.Layers {
			if _, err := r.b.Envs.Blobs.Stat(ctx, l.Digest); err != nil {
				return m, false
			}
		}
	}
	return m, true
}

// mkWorkdir creates the WORKDIR no layer step has created yet (st.mkdir), its
// missing directories owned by the USER at that WORKDIR, as docker build does
// (root if the image does not know the user).
func (r *run) mkWorkdir(ctx context.Context, st *state, w workspace, line int) error {
	if st.mkdir == "" {
		return nil
	}
	fsys, err := w.fs(ctx)
	if err != nil {
		return err
	}
	defer fsys.Close()
	uid, gid, err := chown(ctx, fsys, st.mkdirUser)
	if err != nil {
		uid, gid = 0, 0
	}
	if err := mkdirOwned(ctx, fsys, st.mkdir, uid, gid); err != nil {
		return fmt.Errorf("Dockerfile line %d: WORKDIR %s: %w", line, st.mkdir, err)
	}
	return nil
}

// finish writes the final state as environment req.Name.
func (r *run) finish(ctx context.Context, st *state) (api.Image, error) {
	if st.mkdir != "" { // a WORKDIR no later step created
		step := api.BuildStep{Line: st.mkdirLine, Instruction: "WORKDIR " + st.mkdir + " (create the directory)"}
		t0 := time.Now()
		if err := r.layerStep(ctx, st, st.chain("MKDIR", st.mkdir), &step, nil); err != nil {
			return api.Image{}, err
		}
		step.Millis = ms(time.Since(t0))
		r.record(step)
	}
	layers := st.layers
	if len(layers) == 0 {
		return api.Image{}, errdefs.Invalid("Dockerfile: the stage FROM scratch has no files (add a COPY or ADD)")
	}
	if slices.ContainsFunc(layers, func(l image.Layer) bool { return l.Digest == "" }) {
		var err error
		if layers, err = r.b.BlobLayers(ctx, image.Image{Name: st.from, Layers: layers}); err != nil {
			return api.Image{}, err
		}
	}
	layers = slices.Clone(layers)
	for i := range layers {
		layers[i].Dir, layers[i].Role = "", ""
	}
	image.Roles(layers, false)
	cfg := cloneConfig(&st.cfg)
	if err := cfg.Validate(); err != nil {
		return api.Image{}, err
	}
	m := image.Manifest{Name: r.req.Name, Description: "built from a Dockerfile", Layers: layers, Config: cfg,
		BlobStore: r.b.Envs.Spec, Created: time.Now().UTC()}
	for _, l := range layers {
		if r.b.Envs.Blobs != nil {
			if _, err := r.b.Envs.Blobs.Stat(ctx, l.Digest); err != nil {
				return api.Image{}, err
			}
		}
	}
	// A rebuild replaces the name, as docker build -t does.
	if _, err := r.b.Envs.State.PutEnv(ctx, m, envstore.Cond{Any: true}); err != nil {
		return api.Image{}, err
	}
	out := api.Image{Name: m.Name, Kind: "layered", Config: m.Config.API()}
	for _, l := range m.Layers {
		out.Layers = append(out.Layers, api.ImageLayer{Digest: l.Digest, Role: l.Role, BlobStore: m.BlobStore, Size: l.Size})
		out.Size += l.Size
	}
	return out, nil
}

// joinPath resolves p against dir (an absolute p stands as it is), cleaned.
func joinPath(dir, p string) string {
	if path.IsAbs(p) {
		return cleanAbs(p)
	}
	return cleanAbs(dir + "/" + p)
}
