package driver

import (
	"context"
	"path"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Snapshotter is implemented by instances whose writable layer can be copied
// out while they run (Capabilities.Fork and Capabilities.Commit): the agent
// forks a sandbox by starting children on the parent's layers plus such a copy,
// and commits one by packing the copy into an EROFS layer.
type Snapshotter interface {
	// SnapshotRW copies the writable layer into dir (created; it must not
	// exist) in overlayfs's own format: a deleted lower file is a 0/0 character
	// device (a whiteout), a directory that hides the lowers carries
	// trusted.overlay.opaque="y"; owners, modes, times, xattrs, symlinks (never
	// followed), FIFOs and hard links are kept, sparse files keep their holes;
	// sockets and device nodes other than whiteouts are left out. A layer whose
	// sparse files claim more bytes beyond their data than the writable layer's
	// size is refused with resource_exhausted (a layer or tar built from the
	// copy writes holes out). Paths matching exclude (see MatchExclude) are
	// left out. The sandbox's processes are frozen for the copy (a paused
	// sandbox stays paused), so the copy is consistent and nothing inside can
	// swap a directory for a symlink under it; processes are not copied.
	SnapshotRW(ctx context.Context, dir string, exclude []string) (SnapshotStats, error)
}

// SnapshotStats says what a SnapshotRW copied.
type SnapshotStats struct {
	Entries   int   `json:"entries"`   // files, dirs, links, nodes, whiteouts
	Whiteouts int   `json:"whiteouts"` // deleted lower files
	Opaque    int   `json:"opaque"`    // directories that hide the lowers
	Excluded  int   `json:"excluded"`  // entries left out (a directory counts once)
	Bytes     int64 `json:"bytes"`     // regular-file data copied
}

// MatchExclude reports whether path (absolute, inside the sandbox, cleaned)
// matches one of the patterns: a pattern starting with "/" names that path and
// everything under it ("/tmp", "/root/.cache"); any other pattern is matched
// with path.Match against each path element's base name ("__pycache__",
// "*.pyc"), so it also leaves out whatever is under a matching directory.
func MatchExclude(p string, patterns []string) bool {
	for _, pat := range patterns {
		if strings.HasPrefix(pat, "/") {
			pat = path.Clean(pat)
			if p == pat || pat == "/" || strings.HasPrefix(p, pat+"/") {
				return true
			}
			continue
		}
		if ok, _ := path.Match(pat, path.Base(p)); ok {
			return true
		}
	}
	return false
}

// CheckExclude validates exclude patterns (outside input): each is non-empty,
// at most 4096 bytes, without NUL, and a valid path.Match pattern.
func CheckExclude(patterns []string) error {
	if len(patterns) > 256 {
		return errdefs.Invalid("exclude: at most 256 patterns")
	}
	for _, pat := range patterns {
		if pat == "" || len(pat) > 4096 || strings.ContainsRune(pat, 0) {
			return errdefs.Invalid("exclude pattern %q: must be non-empty, at most 4096 bytes, without NUL", pat)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return errdefs.Invalid("exclude pattern %q: %v", pat, err)
		}
	}
	return nil
}
