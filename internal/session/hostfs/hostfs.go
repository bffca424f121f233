// Package hostfs adapts internal/fsops (a sandbox root directory fd on this host,
// every path resolved with openat2(RESOLVE_IN_ROOT)) to the session.FS interface,
// for node-side implementations of the session service whose driver hands out a
// root directory (the container driver) and for test fakes.
package hostfs

import (
	"context"
	"io"
	"os"

	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FS is a session.FS over an fsops.FS; it owns the fsops.FS and closes it.
type FS struct {
	fs *fsops.FS
}

var _ session.FS = (*FS)(nil)

// New returns a session.FS over fs (taking ownership of it).
func New(fs *fsops.FS) *FS { return &FS{fs: fs} }

// Open opens a regular file for reading.
func (f *FS) Open(ctx context.Context, path string) (io.ReadCloser, api.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, api.FileInfo{}, err
	}
	return f.fs.Open(path)
}

// Stat describes path itself (a final symlink is not followed).
func (f *FS) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	return f.fs.Stat(path)
}

// List lists a directory's entries.
func (f *FS) List(ctx context.Context, path string) ([]api.FileInfo, error) {
	return f.fs.List(path)
}

// WriteFile creates or replaces a file with r's content.
func (f *FS) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	return f.fs.WriteFile(path, mode, ctxReader{ctx, r}, max)
}

// Mkdir creates a directory and describes it.
func (f *FS) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	if err := f.fs.Mkdir(path, mode, parents); err != nil {
		return api.FileInfo{}, err
	}
	return f.fs.Stat(path)
}

// Remove removes a file, an empty directory, or a tree when recursive.
func (f *FS) Remove(ctx context.Context, path string, recursive bool) error {
	return f.fs.Remove(path, recursive)
}

// Rename moves a file or directory within the sandbox.
func (f *FS) Rename(ctx context.Context, from, to string) error {
	return f.fs.Rename(from, to)
}

// WriteTar writes path as a tar stream to w.
func (f *FS) WriteTar(ctx context.Context, path string, w io.Writer) error {
	return f.fs.WriteTar(path, ctxWriter{ctx, w})
}

// ExtractTar unpacks a tar (or tar.gz) stream into the directory path.
func (f *FS) ExtractTar(ctx context.Context, path string, r io.Reader) error {
	return f.fs.ExtractTar(path, ctxReader{ctx, r})
}

// Close releases the sandbox's root fd.
func (f *FS) Close() error { return f.fs.Close() }

// ctxReader stops a long copy once ctx ends.
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

// ctxWriter stops a long copy once ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
