package fsops

import (
	"path"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// File types reported in api.FileInfo.Type.
const (
	typeFile    = "file"
	typeDir     = "dir"
	typeSymlink = "symlink"
	typeOther   = "other"
)

// fileInfo describes the object at cleaned sandbox path p from its stat; link is
// the target of a symlink.
func fileInfo(p string, st *unix.Stat_t, link string) api.FileInfo {
	name := path.Base(p)
	typ := typeOther
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		typ = typeFile
	case unix.S_IFDIR:
		typ = typeDir
	case unix.S_IFLNK:
		typ = typeSymlink
	}
	return api.FileInfo{
		Name:    name,
		Path:    p,
		Size:    st.Size,
		Mode:    st.Mode & 0o7777,
		Type:    typ,
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		Link:    link,
		UID:     int(st.Uid),
		GID:     int(st.Gid),
	}
}

// isType reports whether st is of type t (unix.S_IF*).
func isType(st *unix.Stat_t, t uint32) bool { return st.Mode&unix.S_IFMT == t }
