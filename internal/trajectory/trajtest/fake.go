package trajtest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Fake is an in-memory session.Service (sandboxes, processes, files, FnCall)
// for the suite: no
// processes, no isolation. Exec understands `echo ARGS...` (to stderr when the
// last argument is ">&2"), `cat` (stdin to stdout) and `exit N`, also as
// `sh -c "..."`; anything else exits 127.
// Each sandbox has an in-memory file tree. It counts the operations that ran, so
// a test can tell a replay (nothing ran) from a live run.
type Fake struct {
	session.Unimplemented
	mu        sync.Mutex
	seq       int
	sandboxes map[string]*fakeSandbox
	ports     map[int]string
	runs      int
	fail      map[string]error // op → the error it fails with once
}

type fakeSandbox struct {
	sb    api.Sandbox
	files map[string][]byte // path → content; a directory is a nil entry
	procs int
}

// NewFake returns an empty fake.
func NewFake() *Fake {
	return &Fake{sandboxes: map[string]*fakeSandbox{}, ports: map[int]string{}, fail: map[string]error{}}
}

var _ session.Service = (*Fake)(nil)

// Runs is how many operations ran (exec, stream, process, file changes, dial, fncall).
func (f *Fake) Runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

// FailNext makes the next operation op ("exec", "write", ...) fail with err.
func (f *Fake) FailNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = err
}

// Expose makes Dial(any sandbox, port) connect to addr.
func (f *Fake) Expose(port int, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports[port] = addr
}

// Kill makes a sandbox's init exit (the sandbox stays listed, as exited).
func (f *Fake) Kill(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sandboxes[id]; ok {
		s.sb.State = api.StateExited
	}
}

// ran counts an operation on sandbox id (which must run) and returns the error
// injected for op, if any.
func (f *Fake) ran(id, op string) (*fakeSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[op]; err != nil {
		delete(f.fail, op)
		return nil, err
	}
	s, err := f.running(id)
	if err != nil {
		return nil, err
	}
	f.runs++
	return s, nil
}

func (f *Fake) running(id string) (*fakeSandbox, error) {
	s, ok := f.sandboxes[id]
	if !ok {
		return nil, errdefs.NotFound("sandbox %q", id)
	}
	if s.sb.State == api.StateExited {
		return nil, errdefs.New(api.CodeSandboxGone, "sandbox %s: init exited", id)
	}
	return s, nil
}

func (f *Fake) Info(context.Context) (api.Info, error) {
	return api.Info{Version: "fake", Node: "fake", Backends: []string{api.BackendContainer}}, nil
}

func (f *Fake) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.RequestID != "" {
		for _, s := range f.sandboxes {
			if s.sb.RequestID == req.RequestID {
				return s.sb, nil
			}
		}
	}
	f.seq++
	now := time.Now().UTC()
	sb := api.Sandbox{ID: fmt.Sprintf("fake-%d", f.seq), Backend: api.BackendContainer, Image: req.Image,
		State: api.StateRunning, CPU: 1, MemoryBytes: 256 << 20, CreatedAt: now, LastActiveAt: now,
		Env: req.Env, Labels: req.Labels, RequestID: req.RequestID}
	f.sandboxes[sb.ID] = &fakeSandbox{sb: sb, files: map[string][]byte{"/": nil, "/root": nil, "/tmp": nil}}
	return sb, nil
}

func (f *Fake) Get(_ context.Context, id string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[id]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q", id)
	}
	return s.sb, nil
}

func (f *Fake) List(context.Context) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []api.Sandbox{}
	for _, s := range f.sandboxes {
		out = append(out, s.sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *Fake) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		return errdefs.NotFound("sandbox %q", id)
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *Fake) state(id, to string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.running(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	s.sb.State = to
	return s.sb, nil
}

func (f *Fake) Pause(_ context.Context, id string) (api.Sandbox, error) {
	return f.state(id, api.StatePaused)
}

func (f *Fake) Resume(_ context.Context, id string) (api.Sandbox, error) {
	return f.state(id, api.StateRunning)
}

func (f *Fake) Reset(_ context.Context, id string) (api.Sandbox, error) {
	return f.state(id, api.StateRunning)
}

func argv(req api.ExecRequest) []string {
	if req.Shell != "" {
		return strings.Fields(req.Shell)
	}
	return req.Cmd
}

// run interprets a command.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) api.ExecResult {
	t0 := time.Now()
	res := api.ExecResult{}
	if len(args) == 3 && args[0] == "sh" && args[1] == "-c" {
		args = strings.Fields(args[2])
	}
	if len(args) > 1 && args[0] == "echo" && args[len(args)-1] == ">&2" {
		args, stdout = args[:len(args)-1], stderr
	}
	switch {
	case len(args) == 0:
		res.ExitCode, res.Error = 127, "empty command"
	case args[0] == "echo":
		fmt.Fprintln(stdout, strings.Join(args[1:], " "))
	case args[0] == "cat":
		if stdin != nil {
			_, _ = io.Copy(stdout, stdin)
		}
	case args[0] == "exit" && len(args) == 2:
		res.ExitCode, _ = strconv.Atoi(args[1])
	default:
		res.ExitCode, res.Error = 127, fmt.Sprintf("%s: command not found", args[0])
	}
	res.DurationMs = float64(time.Since(t0).Microseconds()) / 1000
	return res
}

func stdinOf(req api.ExecRequest) io.Reader {
	if req.StdinBase64 != "" {
		return base64Reader(req.StdinBase64)
	}
	return strings.NewReader(req.Stdin)
}

func (f *Fake) Exec(_ context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	if _, err := f.ran(id, "exec"); err != nil {
		return api.ExecResult{}, err
	}
	var out, errb bytes.Buffer
	res := run(argv(req), stdinOf(req), &out, &errb)
	res.Stdout, res.Stderr = out.String(), errb.String()
	return res, nil
}

func (f *Fake) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error) {
	if _, err := f.ran(id, "stream"); err != nil {
		return api.ExecResult{}, err
	}
	if s.Started != nil {
		s.Started(4242)
	}
	in := s.Stdin
	if in == nil {
		in = stdinOf(req)
	}
	out, errw := s.Stdout, s.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	res := run(argv(req), ctxReader{ctx, in}, out, errw)
	if err := ctx.Err(); err != nil {
		return api.ExecResult{}, err
	}
	return res, nil
}

// ctxReader stops reading once ctx ends (the fake's stand-in for a killed process).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (f *Fake) StartProcess(_ context.Context, id string, req api.ExecRequest) (api.Process, error) {
	s, err := f.ran(id, "process")
	if err != nil {
		return api.Process{}, err
	}
	f.mu.Lock()
	s.procs++
	n := s.procs
	f.mu.Unlock()
	now := time.Now().UTC()
	res := run(argv(req), stdinOf(req), io.Discard, io.Discard)
	return api.Process{ID: fmt.Sprintf("p%d", n), PID: 100 + n, Cmd: argv(req), StartedAt: now, Result: &res}, nil
}

func (f *Fake) ListProcesses(context.Context, string) ([]api.Process, error) { return nil, nil }

func (f *Fake) GetProcess(_ context.Context, id, procID string) (api.Process, error) {
	return api.Process{}, errdefs.NotFound("process %q", procID)
}

func (f *Fake) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	return f.GetProcess(ctx, id, procID)
}

func (f *Fake) KillProcess(ctx context.Context, id, procID string, _ int) error {
	_, err := f.GetProcess(ctx, id, procID)
	return err
}

func (f *Fake) ProcessLogs(ctx context.Context, id, procID, _ string, _ int64) (io.ReadCloser, error) {
	_, err := f.GetProcess(ctx, id, procID)
	return nil, err
}

func (f *Fake) FS(_ context.Context, id string) (session.FS, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.running(id); err != nil {
		return nil, err
	}
	return &fakeFS{f: f, id: id}, nil
}

func (f *Fake) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := f.ran(id, "dial"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	addr, ok := f.ports[port]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial port %d: %w", port, errors.New("connection refused"))
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// FnCall accepts every call whose files are not empty; its stdout is the first
// test's stdin.
func (f *Fake) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	f.mu.Lock()
	f.runs++
	f.mu.Unlock()
	res := api.FnCallResult{Verdict: api.VerdictAccepted, Tests: []api.FnCallTestResult{}}
	for _, t := range req.Tests {
		res.Tests = append(res.Tests, api.FnCallTestResult{Verdict: api.VerdictAccepted, Stdout: t.Stdin})
	}
	return res, nil
}

// fakeFS is a sandbox's in-memory file tree.
type fakeFS struct {
	f  *Fake
	id string
}

func (fs *fakeFS) tree() (map[string][]byte, error) {
	s, err := fs.f.running(fs.id)
	if err != nil {
		return nil, err
	}
	return s.files, nil
}

func info(p string, data []byte, dir bool) api.FileInfo {
	fi := api.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(data)), Mode: 0o644, Type: "file"}
	if dir {
		fi.Mode, fi.Type, fi.Size = 0o755, "dir", 0
	}
	return fi
}

func (fs *fakeFS) Open(_ context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	t, err := fs.tree()
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	p = path.Clean(p)
	data, ok := t[p]
	if !ok {
		return nil, api.FileInfo{}, errdefs.NotFound("%s: no such file", p)
	}
	if data == nil {
		return nil, api.FileInfo{}, errdefs.Invalid("%s is a directory", p)
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(data))), info(p, data, false), nil
}

func (fs *fakeFS) Stat(_ context.Context, p string) (api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	t, err := fs.tree()
	if err != nil {
		return api.FileInfo{}, err
	}
	p = path.Clean(p)
	data, ok := t[p]
	if !ok {
		return api.FileInfo{}, errdefs.NotFound("%s: no such file", p)
	}
	return info(p, data, data == nil), nil
}

func (fs *fakeFS) List(_ context.Context, p string) ([]api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	t, err := fs.tree()
	if err != nil {
		return nil, err
	}
	p = path.Clean(p)
	var out []api.FileInfo
	for q, data := range t {
		if q != p && path.Dir(q) == p {
			out = append(out, info(q, data, data == nil))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// change runs fn on the tree of a running sandbox, counted as a run.
func (fs *fakeFS) change(op string, fn func(t map[string][]byte) error) error {
	s, err := fs.f.ran(fs.id, op)
	if err != nil {
		return err
	}
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	return fn(s.files)
}

func parentOK(t map[string][]byte, p string) error {
	if d, ok := t[path.Dir(p)]; !ok || d != nil {
		return errdefs.NotFound("%s: no such directory", path.Dir(p))
	}
	return nil
}

func (fs *fakeFS) WriteFile(_ context.Context, p string, _ os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return api.FileInfo{}, err
	}
	if int64(len(data)) > max {
		return api.FileInfo{}, errdefs.New(api.CodePayloadTooLarge, "over %d bytes", max)
	}
	p = path.Clean(p)
	err = fs.change("write", func(t map[string][]byte) error {
		if err := parentOK(t, p); err != nil {
			return err
		}
		t[p] = append([]byte{}, data...)
		return nil
	})
	return info(p, data, false), err
}

func (fs *fakeFS) Mkdir(_ context.Context, p string, _ os.FileMode, parents bool) (api.FileInfo, error) {
	p = path.Clean(p)
	err := fs.change("mkdir", func(t map[string][]byte) error {
		if _, ok := t[p]; ok {
			return errdefs.New(api.CodeAlreadyExists, "%s exists", p)
		}
		if !parents {
			if err := parentOK(t, p); err != nil {
				return err
			}
		}
		for q := p; q != "/"; q = path.Dir(q) {
			if _, ok := t[q]; !ok {
				t[q] = nil
			}
		}
		return nil
	})
	return info(p, nil, true), err
}

func (fs *fakeFS) Remove(_ context.Context, p string, recursive bool) error {
	p = path.Clean(p)
	return fs.change("remove", func(t map[string][]byte) error {
		if _, ok := t[p]; !ok {
			return errdefs.NotFound("%s: no such file", p)
		}
		for q := range t {
			if strings.HasPrefix(q, p+"/") {
				if !recursive {
					return errdefs.Invalid("%s is not empty", p)
				}
				delete(t, q)
			}
		}
		delete(t, p)
		return nil
	})
}

func (fs *fakeFS) Rename(_ context.Context, from, to string) error {
	from, to = path.Clean(from), path.Clean(to)
	return fs.change("rename", func(t map[string][]byte) error {
		data, ok := t[from]
		if !ok {
			return errdefs.NotFound("%s: no such file", from)
		}
		delete(t, from)
		t[to] = data
		return nil
	})
}

func (fs *fakeFS) WriteTar(_ context.Context, p string, w io.Writer) error {
	return errdefs.New(api.CodeNotImplemented, "the fake has no tar download")
}

// ExtractTar unpacks regular files and directories.
func (fs *fakeFS) ExtractTar(_ context.Context, p string, r io.Reader) error {
	p = path.Clean(p)
	type entry struct {
		name string
		data []byte
		dir  bool
	}
	var entries []entry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errdefs.Invalid("tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return errdefs.Invalid("tar: %v", err)
		}
		entries = append(entries, entry{path.Join(p, h.Name), data, h.Typeflag == tar.TypeDir})
	}
	return fs.change("extract", func(t map[string][]byte) error {
		if d, ok := t[p]; !ok || d != nil {
			return errdefs.NotFound("%s: no such directory", p)
		}
		for _, e := range entries {
			if e.dir {
				t[e.name] = nil
			} else {
				t[e.name] = e.data
			}
		}
		return nil
	})
}

func (fs *fakeFS) Close() error { return nil }

func base64Reader(s string) io.Reader {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return strings.NewReader("")
	}
	return bytes.NewReader(b)
}
