// Package fsops implements a sandbox's file API (read, write, mkdir, list, stat,
// remove, tar upload and download) on the host side, resolving every path inside the
// sandbox's root with openat2(RESOLVE_IN_ROOT) so no "..", absolute symlink or
// magic link can lead outside it.
//
// Path rules. Every path given to FS is a path inside the sandbox: absolute and
// relative paths both start at the sandbox root, and the path is cleaned lexically
// first ("/../../x" is "/x"). Paths with NUL bytes, and empty paths, are rejected
// with invalid_argument. Only the cleaned, sandbox-relative string is ever handed to
// the kernel, always together with a directory fd: either the root fd with
// RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS (symlinks, absolute ones included, are
// followed but resolved inside the root), or a parent directory fd with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS and a single name. Operations on a final
// component (mkdir, unlink, rename, lstat, chown, utimes, symlink and link creation)
// open the parent directory and use the *at syscalls on the base name, never
// following a final symlink, and mode changes go through an fd (fchmod), never a
// path, so a process inside the sandbox swapping a name for a symlink cannot
// redirect them.
//
// Symlink semantics: Open, List, WriteTar (for the top-level path) and ExtractTar
// (for the destination directory) follow symlinks inside the root. WriteFile follows
// a final symlink inside the root too (like a shell's ">"), writing to its target.
// Stat and Remove act on the final component itself (lstat/unlink semantics). Walks
// (recursive Remove, WriteTar, ExtractTar entries) never follow symlinks.
//
// Error classes (see internal/errdefs): ENOENT → not_found; EEXIST → already_exists;
// ENOTEMPTY, EBUSY, ETXTBSY and a walk meeting a mount point → conflict (the path's
// current state is in the way); ENOSPC/EDQUOT → resource_exhausted ("writable layer
// full"); ENOTDIR, EISDIR, EINVAL, ELOOP, ENAMETOOLONG, EXDEV, EACCES, EPERM and
// EROFS → invalid_argument (the request cannot succeed as asked, e.g. writing into a
// read-only /proc/sys; nothing is wrong with dsec); an upload over its limit →
// payload_too_large; anything else → internal.
package fsops

import (
	"os"
)

// FS is one sandbox's file system, rooted at an O_PATH directory fd.
type FS struct {
	root *os.File
	ids  IDMap // see NewMapped
	// holeBudget bounds the holes (see Holes) a WriteTar may write out as
	// zeros; 0: unbounded.
	holeBudget int64
}

// SetHoleBudget bounds the bytes of sparse files' holes one WriteTar may
// stream (a tar has no holes: they go out as zeros), normally the sandbox's
// disk limit; past it WriteTar fails with resource_exhausted before the file
// that crosses it. 0 means unbounded.
func (f *FS) SetHoleBudget(n int64) { f.holeBudget = n }

// New takes ownership of root (an O_PATH or O_DIRECTORY fd of the sandbox's "/").
func New(root *os.File) *FS { return &FS{root: root} }

// Close releases the root fd.
func (f *FS) Close() error { return f.root.Close() }

// rootFD returns the raw root fd; f.root stays referenced by f, so the fd stays open
// for as long as f is in use.
func (f *FS) rootFD() int { return int(f.root.Fd()) }
