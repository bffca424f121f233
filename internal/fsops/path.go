package fsops

import (
	"path"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// cleanPath turns a caller's path into the canonical absolute path inside the
// sandbox ("/", "/etc/passwd"): relative paths start at the root, ".." cannot climb
// above "/", and NUL bytes or an empty path are rejected.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("path contains a NUL byte")
	}
	return path.Clean("/" + p), nil
}

// relPath returns the form of a cleaned path handed to openat2 against the root fd:
// "." for the root, otherwise the path without its leading slash.
func relPath(clean string) string {
	if clean == "/" {
		return "."
	}
	return strings.TrimPrefix(clean, "/")
}

// splitPath splits a cleaned path other than "/" into its parent (cleaned) and base.
func splitPath(clean string) (parent, base string) {
	i := strings.LastIndexByte(clean, '/')
	parent, base = clean[:i], clean[i+1:]
	if parent == "" {
		parent = "/"
	}
	return parent, base
}

// cleanEntryName cleans a tar entry name (or hard link target) relative to the
// extraction directory: leading slashes are dropped ("/a" is "a"), "." and empty
// components vanish, and a ".." that would climb above the extraction directory is
// an invalid_argument error. The result is "" for the directory itself, else a
// slash-separated relative path without "." or ".." components.
func cleanEntryName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errdefs.Invalid("tar entry %q contains a NUL byte", name)
	}
	var out []string
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(out) == 0 {
				return "", errdefs.Invalid("tar entry %q leads outside the extraction directory", name)
			}
			out = out[:len(out)-1]
		default:
			out = append(out, c)
		}
	}
	return strings.Join(out, "/"), nil
}

// splitRel splits a relative path from cleanEntryName into parent ("" for the top)
// and base.
func splitRel(rel string) (parent, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}
