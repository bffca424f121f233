package fsops

import (
	"context"
	"io"
	"os"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// SessionFS is an FS as a session.FS: the file system a driver instance hands
// out. The host operations are short syscalls, so ctx is only checked before each.
type SessionFS struct{ fs *FS }

var _ session.FS = SessionFS{}

// NewSession takes ownership of root like New.
func NewSession(root *os.File) SessionFS { return SessionFS{New(root)} }

// Host is the underlying FS.
func (s SessionFS) Host() *FS { return s.fs }

func (s SessionFS) Open(ctx context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, api.FileInfo{}, err
	}
	return s.fs.Open(p)
}

func (s SessionFS) Stat(ctx context.Context, p string) (api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return api.FileInfo{}, err
	}
	return s.fs.Stat(p)
}

func (s SessionFS) List(ctx context.Context, p string) ([]api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.fs.List(p)
}

func (s SessionFS) WriteFile(ctx context.Context, p string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return api.FileInfo{}, err
	}
	return s.fs.WriteFile(p, mode, r, max)
}

func (s SessionFS) Mkdir(ctx context.Context, p string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return api.FileInfo{}, err
	}
	if err := s.fs.Mkdir(p, mode, parents); err != nil {
		return api.FileInfo{}, err
	}
	return s.fs.Stat(p)
}

func (s SessionFS) Remove(ctx context.Context, p string, recursive bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fs.Remove(p, recursive)
}

func (s SessionFS) Rename(ctx context.Context, from, to string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r, ok := any(s.fs).(interface{ Rename(from, to string) error }); ok {
		return r.Rename(from, to)
	}
	return errdefs.New(api.CodeNotImplemented, "rename is not available")
}

func (s SessionFS) WriteTar(ctx context.Context, p string, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fs.WriteTar(p, w)
}

func (s SessionFS) ExtractTar(ctx context.Context, p string, r io.Reader) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fs.ExtractTar(p, r)
}

func (s SessionFS) Close() error { return s.fs.Close() }
