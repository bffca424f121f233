// Package fsops implements a sandbox's file API (read, write, mkdir, list, stat,
// remove, tar upload and download) on the host side, resolving every path inside the
// sandbox's root with openat2(RESOLVE_IN_ROOT) so no "..", absolute symlink or
// magic link can lead outside it.
package fsops

import (
	"io"
	"os"

	"github.com/dsec-dev/dsec/pkg/api"
)

// FS is one sandbox's file system, rooted at an O_PATH directory fd.
type FS struct {
	root *os.File
}

// New takes ownership of root (an O_PATH or O_DIRECTORY fd of the sandbox's "/").
func New(root *os.File) *FS { return &FS{root: root} }

// Close releases the root fd.
func (f *FS) Close() error { return f.root.Close() }

// TODO(fsops helper): implement. Signatures are fixed; see the package doc.

// Open opens a regular file for reading and returns its info.
func (f *FS) Open(path string) (io.ReadCloser, api.FileInfo, error) { panic("unimplemented") }

// WriteFile creates or truncates path with mode (0 = 0644), writing at most
// maxBytes from r (0 = no limit; more → payload_too_large, file removed).
func (f *FS) WriteFile(path string, mode os.FileMode, r io.Reader, maxBytes int64) (api.FileInfo, error) {
	panic("unimplemented")
}

// Mkdir creates a directory (with parents if asked).
func (f *FS) Mkdir(path string, mode os.FileMode, parents bool) error { panic("unimplemented") }

// List lists a directory, sorted by name.
func (f *FS) List(path string) ([]api.FileInfo, error) { panic("unimplemented") }

// Stat describes path without following a final symlink.
func (f *FS) Stat(path string) (api.FileInfo, error) { panic("unimplemented") }

// Remove removes a file or an empty directory, or a whole tree when recursive.
func (f *FS) Remove(path string, recursive bool) error { panic("unimplemented") }

// WriteTar writes path (a file or a directory tree) as an uncompressed tar to w.
func (f *FS) WriteTar(path string, w io.Writer) error { panic("unimplemented") }

// ExtractTar extracts a tar (plain or gzip, detected) into directory path.
func (f *FS) ExtractTar(path string, r io.Reader) error { panic("unimplemented") }
