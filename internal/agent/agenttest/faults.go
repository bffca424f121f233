package agenttest

import (
	"context"
	"io"
	"net"
	"os"
	"sync"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Faults is an interceptor for tests of what sits above a node (the
// trajectory log, a retrying client): it counts the operations that reached
// the node through it, so a test can tell a replay (nothing ran) from a live
// run, and fails the next calls of a method with an injected error before
// they reach the node. The operations are the ones that run something or
// touch a sandbox's files: Exec, ExecStream, StartProcess, Dial, FnCall and
// the file operations (Open, Stat, List, WriteFile, Mkdir, Remove, Rename,
// WriteTar, ExtractTar); reading a sandbox's record (Get, List) is not one.
// Put it directly above the node (or above what answers FnCall).
type Faults struct {
	mu   sync.Mutex
	runs int
	fail map[string][]error // method name → the errors its next calls fail with
}

// Interceptor returns the session interceptor that counts into f and fails
// what f was told to.
func (f *Faults) Interceptor() session.Interceptor {
	return func(next session.Service) session.Service { return faulty{next, f} }
}

// Runs returns how many operations reached the node so far.
func (f *Faults) Runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

// FailNext makes the next n calls of method ("Exec", "WriteFile", ...: the
// name of a session.Service or session.FS method) fail with err; they do not
// reach the node and are not counted.
func (f *Faults) FailNext(method string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string][]error{}
	}
	for range n {
		f.fail[method] = append(f.fail[method], err)
	}
}

// op counts a call of method, or returns the error injected for it.
func (f *Faults) op(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errs := f.fail[method]; len(errs) > 0 {
		f.fail[method] = errs[1:]
		return errs[0]
	}
	f.runs++
	return nil
}

type faulty struct {
	session.Service
	f *Faults
}

func (s faulty) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	if err := s.f.op("Exec"); err != nil {
		return api.ExecResult{}, err
	}
	return s.Service.Exec(ctx, id, req)
}

func (s faulty) ExecStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	if err := s.f.op("ExecStream"); err != nil {
		return api.ExecResult{}, err
	}
	return s.Service.ExecStream(ctx, id, req, sio)
}

func (s faulty) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	if err := s.f.op("StartProcess"); err != nil {
		return api.Process{}, err
	}
	return s.Service.StartProcess(ctx, id, req)
}

func (s faulty) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := s.f.op("Dial"); err != nil {
		return nil, err
	}
	return s.Service.Dial(ctx, id, port)
}

func (s faulty) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	if err := s.f.op("FnCall"); err != nil {
		return api.FnCallResult{}, err
	}
	return s.Service.FnCall(ctx, req)
}

// FS counts and fails the file system's operations; opening it is none.
func (s faulty) FS(ctx context.Context, id string) (session.FS, error) {
	fs, err := s.Service.FS(ctx, id)
	if err != nil {
		return nil, err
	}
	return faultyFS{fs, s.f}, nil
}

type faultyFS struct {
	session.FS
	f *Faults
}

func (fs faultyFS) Open(ctx context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	if err := fs.f.op("Open"); err != nil {
		return nil, api.FileInfo{}, err
	}
	return fs.FS.Open(ctx, p)
}

func (fs faultyFS) Stat(ctx context.Context, p string) (api.FileInfo, error) {
	if err := fs.f.op("Stat"); err != nil {
		return api.FileInfo{}, err
	}
	return fs.FS.Stat(ctx, p)
}

func (fs faultyFS) List(ctx context.Context, p string) ([]api.FileInfo, error) {
	if err := fs.f.op("List"); err != nil {
		return nil, err
	}
	return fs.FS.List(ctx, p)
}

func (fs faultyFS) WriteFile(ctx context.Context, p string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	if err := fs.f.op("WriteFile"); err != nil {
		return api.FileInfo{}, err
	}
	return fs.FS.WriteFile(ctx, p, mode, r, max)
}

func (fs faultyFS) Mkdir(ctx context.Context, p string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	if err := fs.f.op("Mkdir"); err != nil {
		return api.FileInfo{}, err
	}
	return fs.FS.Mkdir(ctx, p, mode, parents)
}

func (fs faultyFS) Remove(ctx context.Context, p string, recursive bool) error {
	if err := fs.f.op("Remove"); err != nil {
		return err
	}
	return fs.FS.Remove(ctx, p, recursive)
}

func (fs faultyFS) Rename(ctx context.Context, from, to string) error {
	if err := fs.f.op("Rename"); err != nil {
		return err
	}
	return fs.FS.Rename(ctx, from, to)
}

func (fs faultyFS) WriteTar(ctx context.Context, p string, w io.Writer) error {
	if err := fs.f.op("WriteTar"); err != nil {
		return err
	}
	return fs.FS.WriteTar(ctx, p, w)
}

func (fs faultyFS) ExtractTar(ctx context.Context, p string, r io.Reader) error {
	if err := fs.f.op("ExtractTar"); err != nil {
		return err
	}
	return fs.FS.ExtractTar(ctx, p, r)
}
