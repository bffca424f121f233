package e2b_test

import (
	"bytes"
	"context"
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

// fakeService is a session.Service in memory. Its exec understands the scripts
// the tests run through "/bin/bash -l -c SCRIPT" (see run).
type fakeService struct {
	session.Unimplemented
	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	n         int
	// steps records the step tag of every call that carried one: "op N".
	steps []string
	// replay makes every step-tagged call report itself as replayed.
	replay bool
	// resizes records terminal resizes.
	resizes []api.TermSize
	// execs counts the execs that ran.
	execs int
	// chowns records the arguments of every chown run.
	chowns []string
}

type fakeSandbox struct {
	sb      api.Sandbox
	files   map[string]*fakeFile
	procs   map[string]*fakeProc
	watches map[string]*fakeWatch
}

// fakeWatch is a directory watch: what it saw at its last read.
type fakeWatch struct {
	w    api.Watch
	last session.DirSnapshot
}

type fakeFile struct {
	data  []byte
	dir   bool
	mode  uint32
	mtime time.Time
}

var _ session.Service = (*fakeService)(nil)

func newFake() *fakeService { return &fakeService{sandboxes: map[string]*fakeSandbox{}} }

func (f *fakeService) note(ctx context.Context, op string) {
	if st, out, ok := session.StepFrom(ctx); ok {
		f.mu.Lock()
		f.steps = append(f.steps, fmt.Sprintf("%s %s %d", op, st.Trajectory, st.N))
		if f.replay {
			out.Replayed = true
		}
		f.mu.Unlock()
	}
}

func (f *fakeService) stepsSeen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.steps...)
}

// expireLocked applies the deadlines that passed, as a node does: the sandbox
// is deleted, or paused (and then has none).
func (f *fakeService) expireLocked() {
	now := time.Now()
	for id, s := range f.sandboxes {
		switch at := s.sb.ExpiresAt; {
		case at == nil || now.Before(*at):
		case s.sb.OnExpiry == api.ExpiryPause:
			s.sb.State, s.sb.ExpiresAt, s.sb.OnExpiry = api.StatePaused, nil, ""
		default:
			delete(f.sandboxes, id)
		}
	}
}

func (f *fakeService) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	if err := session.ValidateDeadline(req); err != nil {
		return api.Sandbox{}, err
	}
	s, err := f.sandbox(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	at := time.Now().Add(time.Duration(req.TimeoutSeconds) * time.Second)
	switch {
	case req.TimeoutSeconds == 0 && !req.ExtendOnly:
		s.sb.ExpiresAt = nil
	case req.TimeoutSeconds == 0:
	case !req.ExtendOnly || s.sb.ExpiresAt == nil || at.After(*s.sb.ExpiresAt):
		s.sb.ExpiresAt = &at
	}
	if req.OnExpiry != "" {
		s.sb.OnExpiry = req.OnExpiry
	}
	return s.sb, nil
}

func (f *fakeService) sandbox(id string) (*fakeSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	s := f.sandboxes[id]
	if s == nil {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	return s, nil
}

func (f *fakeService) running(id string) (*fakeSandbox, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.sb.State != api.StateRunning {
		return nil, errdefs.Conflict("sandbox %s is %s", id, s.sb.State)
	}
	return s, nil
}

func (f *fakeService) Info(ctx context.Context) (api.Info, error) { return api.Info{Node: "fake"}, nil }

func (f *fakeService) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.note(ctx, "create")
	if req.Image == "missing" {
		return api.Sandbox{}, errdefs.NotFound("image %q not found", req.Image)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	img := req.Image
	if img == "" {
		img = "debian"
	}
	now := time.Now()
	sb := api.Sandbox{ID: fmt.Sprintf("sb-%04d", f.n), Backend: "container", Image: img, State: api.StateRunning,
		CPU: 1, MemoryBytes: 512 << 20, DiskBytes: 1 << 30, CreatedAt: now.Add(time.Duration(f.n) * time.Millisecond),
		Env: req.Env, Labels: req.Labels}
	if req.Network != nil {
		sb.Network = &api.NetworkStatus{Allow: req.Network.Allow, Rules: req.Network.Rules}
	}
	if req.TTLSeconds > 0 {
		at := now.Add(time.Duration(req.TTLSeconds) * time.Second)
		sb.ExpiresAt, sb.OnExpiry = &at, req.OnExpiry
	}
	f.sandboxes[sb.ID] = &fakeSandbox{sb: sb, files: map[string]*fakeFile{
		"/": {dir: true, mode: 0o755}, "/root": {dir: true, mode: 0o700}, "/etc": {dir: true, mode: 0o755},
		"/etc/hostname": {data: []byte("fake\n"), mode: 0o644, mtime: now},
	}}
	if img != "busybox" {
		f.sandboxes[sb.ID].files["/bin"] = &fakeFile{dir: true, mode: 0o755}
		f.sandboxes[sb.ID].files["/bin/bash"] = &fakeFile{data: []byte("ELF"), mode: 0o755, mtime: now}
	}
	return sb, nil
}

func (f *fakeService) Get(ctx context.Context, id string) (api.Sandbox, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return s.sb, nil
}

func (f *fakeService) List(ctx context.Context) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	var out []api.Sandbox
	for _, s := range f.sandboxes {
		out = append(out, s.sb)
	}
	return out, nil
}

func (f *fakeService) Delete(ctx context.Context, id string) error {
	f.note(ctx, "delete")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandboxes[id] == nil {
		return errdefs.NotFound("sandbox %q not found", id)
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeService) setState(id, state string) (api.Sandbox, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s.sb.State = state
	return s.sb, nil
}

func (f *fakeService) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return f.setState(id, api.StatePaused)
}

func (f *fakeService) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	return f.setState(id, api.StateRunning)
}

func (f *fakeService) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	return api.Sandbox{}, errdefs.New(api.CodeNotImplemented, "reset")
}

func (f *fakeService) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	var out, errb bytes.Buffer
	res, err := f.ExecStream(ctx, id, req, session.Stream{Stdout: &out, Stderr: &errb})
	res.Stdout, res.Stderr = out.String(), errb.String()
	return res, err
}

// ExecStream runs SCRIPT of "/bin/bash -l -c SCRIPT" (or "/bin/bash -i -l" with
// a TTY, which echoes its input), one ";"-separated command at a time:
// "echo WORDS", "echo WORDS >&2", "cat" (stdin to stdout), "sleep" (until a
// signal or the timeout), "exit N", "pwd", "env NAME".
func (f *fakeService) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error) {
	f.note(ctx, "exec")
	f.mu.Lock()
	f.execs++
	f.mu.Unlock()
	if _, err := f.running(id); err != nil {
		return api.ExecResult{}, err
	}
	if req.Cwd == "/nonexistent" {
		return api.ExecResult{}, errdefs.Invalid("working directory %q does not exist", req.Cwd)
	}
	if len(req.Cmd) > 0 && req.Cmd[0] == "chown" {
		f.mu.Lock()
		f.chowns = append(f.chowns, strings.Join(req.Cmd[1:], " "))
		f.mu.Unlock()
		return api.ExecResult{}, nil
	}
	if len(req.Cmd) == 0 || (req.Cmd[0] != "/bin/bash" && req.Cmd[0] != "/bin/sh") {
		return api.ExecResult{}, errdefs.Invalid("fake runs only /bin/bash and /bin/sh")
	}
	if req.Cmd[0] == "/bin/sh" && req.Cmd[len(req.Cmd)-1] == "echo $0" {
		_, _ = io.WriteString(s.Stdout, "sh\n")
		return api.ExecResult{}, nil
	}
	if s.Started != nil {
		s.Started(100 + len(req.Cmd[len(req.Cmd)-1]))
	}
	var timeout <-chan time.Time
	if req.TimeoutMs > 0 {
		timeout = time.After(time.Duration(req.TimeoutMs) * time.Millisecond)
	}
	killed := func(sig int) api.ExecResult {
		name := "SIGKILL"
		if sig == 15 {
			name = "SIGTERM"
		}
		return api.ExecResult{ExitCode: -1, Signal: name}
	}
	if req.TTY {
		// The terminal echoes its input until Ctrl+D and prints each resize.
		var wmu sync.Mutex
		write := func(b []byte) { wmu.Lock(); _, _ = s.Stdout.Write(b); wmu.Unlock() }
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case ctl := <-s.Control:
					if ctl.Resize != nil {
						f.mu.Lock()
						f.resizes = append(f.resizes, *ctl.Resize)
						f.mu.Unlock()
						write([]byte(fmt.Sprintf("[%dx%d]", ctl.Resize.Cols, ctl.Resize.Rows)))
					}
				case <-stop:
					return
				}
			}
		}()
		buf := make([]byte, 1024)
		for {
			n, err := s.Stdin.Read(buf)
			if n > 0 {
				write(buf[:n])
				if bytes.Contains(buf[:n], []byte{4}) {
					return api.ExecResult{}, nil
				}
			}
			if err != nil {
				return api.ExecResult{}, nil
			}
		}
	}
	script := req.Cmd[len(req.Cmd)-1]
	for _, c := range strings.Split(script, ";") {
		c = strings.TrimSpace(c)
		switch {
		case c == "" || c == "true":
		case strings.HasPrefix(c, "echo ") && strings.HasSuffix(c, " >&2"):
			_, _ = io.WriteString(s.Stderr, strings.TrimSuffix(strings.TrimPrefix(c, "echo "), " >&2")+"\n")
		case strings.HasPrefix(c, "echo "):
			_, _ = io.WriteString(s.Stdout, strings.TrimPrefix(c, "echo ")+"\n")
		case c == "pwd":
			_, _ = io.WriteString(s.Stdout, req.Cwd+"\n")
		case strings.HasPrefix(c, "env "):
			_, _ = io.WriteString(s.Stdout, req.Env[strings.TrimPrefix(c, "env ")]+"\n")
		case c == "cat":
			if s.Stdin != nil {
				_, _ = io.Copy(s.Stdout, s.Stdin)
			}
		case c == "sleep":
			select {
			case ctl := <-s.Control:
				return killed(ctl.Signal), nil
			case <-timeout:
				return api.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}, nil
			case <-ctx.Done():
				return killed(9), nil
			}
		case strings.HasPrefix(c, "exit "):
			n, _ := strconv.Atoi(strings.TrimPrefix(c, "exit "))
			return api.ExecResult{ExitCode: n}, nil
		case strings.HasPrefix(c, "nosuchcommand"):
			return api.ExecResult{ExitCode: 127, Error: "executable file not found"}, nil
		default:
			return api.ExecResult{}, errdefs.Invalid("fake cannot run %q", c)
		}
	}
	return api.ExecResult{}, nil
}

// fakeProc is a background process of the fake: its ExecStream run on a
// context of its own, with its output kept as logs.
type fakeProc struct {
	p       api.Process
	stdin   *io.PipeWriter
	control chan session.Control
	done    chan struct{}
	mu      sync.Mutex
	logs    map[string]*bytes.Buffer
}

type logWriter struct {
	p      *fakeProc
	stream string
}

func (w logWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.logs[w.stream].Write(b)
}

func (f *fakeService) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	f.note(ctx, "exec")
	s, err := f.running(id)
	if err != nil {
		return api.Process{}, err
	}
	if req.Cwd == "/nonexistent" {
		return api.Process{}, errdefs.Invalid("working directory %q does not exist", req.Cwd)
	}
	f.mu.Lock()
	f.n++
	fp := &fakeProc{p: api.Process{ID: fmt.Sprintf("p%d", f.n), PID: 100 + f.n, Cmd: req.Cmd, Running: true,
		StartedAt: time.Now(), TTY: req.TTY, OpenStdin: req.OpenStdin, Labels: req.Labels},
		control: make(chan session.Control, 4), done: make(chan struct{}),
		logs: map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}}
	if s.procs == nil {
		s.procs = map[string]*fakeProc{}
	}
	s.procs[fp.p.ID] = fp
	f.mu.Unlock()
	st := session.Stream{Stdout: logWriter{fp, "stdout"}, Stderr: logWriter{fp, "stderr"}, Control: fp.control}
	if req.OpenStdin {
		var r *io.PipeReader
		r, fp.stdin = io.Pipe()
		st.Stdin = r
	}
	started := fp.p
	go func() {
		res, err := f.ExecStream(session.WithoutStep(context.Background()), id, req, st)
		if err != nil {
			res = api.ExecResult{ExitCode: -1, Error: err.Error()}
		}
		f.mu.Lock()
		fp.p.Running, fp.p.Result = false, &res
		f.mu.Unlock()
		if fp.stdin != nil {
			fp.stdin.Close()
		}
		close(fp.done)
	}()
	return started, nil
}

func (f *fakeService) proc(id, procID string) (*fakeProc, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := s.procs[procID]; p != nil {
		return p, nil
	}
	return nil, errdefs.NotFound("process %q not found", procID)
}

func (f *fakeService) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Process
	for _, p := range s.procs {
		out = append(out, p.p)
	}
	return out, nil
}

func (f *fakeService) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	p, err := f.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return p.p, nil
}

func (f *fakeService) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	p, err := f.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	return f.GetProcess(ctx, id, procID)
}

func (f *fakeService) KillProcess(ctx context.Context, id, procID string, sig int) error {
	p, err := f.proc(id, procID)
	if err != nil {
		return err
	}
	select {
	case p.control <- session.Control{Signal: sig}:
		return nil
	case <-p.done:
		return errdefs.Conflict("process %s has ended", procID)
	}
}

func (f *fakeService) SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error {
	p, err := f.proc(id, procID)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return errdefs.Conflict("process %s has ended", procID)
	default:
	}
	if in.Resize != nil {
		if err := session.CheckTermSize(*in.Resize); err != nil {
			return err
		}
		p.control <- session.Control{Resize: in.Resize}
	}
	if len(in.Data) > 0 {
		if _, err := p.stdin.Write(in.Data); err != nil {
			return errdefs.Conflict("input closed")
		}
	}
	if in.EOF {
		p.stdin.Close()
	}
	return nil
}

func (f *fakeService) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	p, err := f.proc(id, procID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.logs[stream].Bytes()
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	return io.NopCloser(bytes.NewReader(append([]byte(nil), b[offset:]...))), nil
}

func (f *fakeService) CreateWatch(ctx context.Context, id string, req api.WatchRequest) (api.Watch, error) {
	fs, err := f.FS(ctx, id)
	if err != nil {
		return api.Watch{}, err
	}
	fi, err := fs.Stat(ctx, req.Path)
	if err != nil {
		return api.Watch{}, err
	}
	if fi.Type != "dir" {
		return api.Watch{}, errdefs.Invalid("not a directory")
	}
	snap, err := session.ScanDir(ctx, fs, req.Path, req.Recursive, 1000)
	if err != nil {
		return api.Watch{}, err
	}
	s, _ := f.sandbox(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(s.watches) >= 64 {
		return api.Watch{}, errdefs.New(api.CodeResourceExhausted, "too many watches")
	}
	if s.watches == nil {
		s.watches = map[string]*fakeWatch{}
	}
	f.n++
	w := &fakeWatch{w: api.Watch{ID: fmt.Sprintf("w%d", f.n), Path: req.Path, Recursive: req.Recursive}, last: snap}
	s.watches[w.w.ID] = w
	return w.w, nil
}

func (f *fakeService) watch(id, watchID string) (*fakeSandbox, *fakeWatch, error) {
	s, err := f.sandbox(id)
	if err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := s.watches[watchID]; w != nil {
		return s, w, nil
	}
	return nil, nil, errdefs.NotFound("watch %q not found", watchID)
}

func (f *fakeService) WatchEvents(ctx context.Context, id, watchID string) ([]api.WatchEvent, error) {
	s, w, err := f.watch(id, watchID)
	if err != nil {
		return nil, err
	}
	fs, err := f.FS(ctx, id)
	if err != nil {
		return nil, err
	}
	cur, err := session.ScanDir(ctx, fs, w.w.Path, w.w.Recursive, 1000)
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			f.mu.Lock()
			delete(s.watches, watchID)
			f.mu.Unlock()
			return nil, errdefs.NotFound("the watched directory was removed")
		}
		return nil, err
	}
	evs := session.DiffDir(w.last, cur)
	w.last = cur
	return evs, nil
}

func (f *fakeService) RemoveWatch(ctx context.Context, id, watchID string) error {
	s, _, err := f.watch(id, watchID)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(s.watches, watchID)
	return nil
}

func (f *fakeService) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[id]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
	}
	s.sb.Network = &api.NetworkStatus{Allow: p.Allow, Rules: p.Rules}
	return s.sb, nil
}

func (f *fakeService) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, errdefs.New(api.CodeNotImplemented, "fake")
}

func (f *fakeService) FS(ctx context.Context, id string) (session.FS, error) {
	s, err := f.running(id)
	if err != nil {
		return nil, err
	}
	return &fakeFS{f: f, s: s}, nil
}

// fakeFS is an in-memory session.FS; paths are cleaned like the real one, so
// "../" cannot leave "/".
type fakeFS struct {
	f *fakeService
	s *fakeSandbox
}

func clean(p string) string { return path.Clean("/" + p) }

func (fs *fakeFS) info(p string, ff *fakeFile) api.FileInfo {
	t := "file"
	if ff.dir {
		t = "dir"
	}
	return api.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(ff.data)), Mode: ff.mode, Type: t, ModTime: ff.mtime}
}

func (fs *fakeFS) Open(ctx context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	ff := fs.s.files[p]
	if ff == nil {
		return nil, api.FileInfo{}, errdefs.NotFound("%s: no such file", p)
	}
	if ff.dir {
		return nil, api.FileInfo{}, errdefs.Invalid("%s is a directory", p)
	}
	return io.NopCloser(bytes.NewReader(append([]byte(nil), ff.data...))), fs.info(p, ff), nil
}

func (fs *fakeFS) Stat(ctx context.Context, p string) (api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	ff := fs.s.files[p]
	if ff == nil {
		return api.FileInfo{}, errdefs.NotFound("%s: no such file", p)
	}
	return fs.info(p, ff), nil
}

func (fs *fakeFS) List(ctx context.Context, p string) ([]api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	if ff := fs.s.files[p]; ff == nil || !ff.dir {
		return nil, errdefs.NotFound("%s: no such directory", p)
	}
	var out []api.FileInfo
	for q, ff := range fs.s.files {
		if q != "/" && path.Dir(q) == p {
			out = append(out, fs.info(q, ff))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (fs *fakeFS) WriteFile(ctx context.Context, p string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	fs.f.note(ctx, "write")
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return api.FileInfo{}, err
	}
	if int64(len(b)) > max {
		return api.FileInfo{}, errdefs.New(api.CodePayloadTooLarge, "file exceeds %d bytes", max)
	}
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	if d := fs.s.files[path.Dir(p)]; d == nil || !d.dir {
		return api.FileInfo{}, errdefs.NotFound("%s: no such directory", path.Dir(p))
	}
	ff := &fakeFile{data: b, mode: uint32(mode.Perm()), mtime: time.Now()}
	fs.s.files[p] = ff
	return fs.info(p, ff), nil
}

func (fs *fakeFS) Mkdir(ctx context.Context, p string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	for q := p; q != "/"; q = path.Dir(q) {
		if fs.s.files[q] == nil {
			fs.s.files[q] = &fakeFile{dir: true, mode: uint32(mode.Perm()), mtime: time.Now()}
		}
	}
	return fs.info(p, fs.s.files[p]), nil
}

func (fs *fakeFS) Remove(ctx context.Context, p string, recursive bool) error {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	p = clean(p)
	if fs.s.files[p] == nil {
		return errdefs.NotFound("%s: no such file", p)
	}
	for q := range fs.s.files {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(fs.s.files, q)
		}
	}
	return nil
}

func (fs *fakeFS) Rename(ctx context.Context, from, to string) error {
	fs.f.mu.Lock()
	defer fs.f.mu.Unlock()
	from, to = clean(from), clean(to)
	if fs.s.files[from] == nil {
		return errdefs.NotFound("%s: no such file", from)
	}
	for q, ff := range fs.s.files {
		if q == from || strings.HasPrefix(q, from+"/") {
			delete(fs.s.files, q)
			fs.s.files[to+strings.TrimPrefix(q, from)] = ff
		}
	}
	return nil
}

func (fs *fakeFS) WriteTar(ctx context.Context, p string, w io.Writer) error {
	return errors.New("fake: no tar")
}
func (fs *fakeFS) ExtractTar(ctx context.Context, p string, r io.Reader) error {
	return errors.New("fake: no tar")
}
func (fs *fakeFS) Close() error { return nil }
