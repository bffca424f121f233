package fsops

import (
	"io"
	"os"
	"path"
	"slices"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// Open opens a regular file for reading and returns its info. Symlinks are followed
// inside the root; directories and other non-regular files are invalid_argument.
// The file is first opened O_PATH and checked, so a device node or FIFO is never
// really opened.
func (f *FS) Open(p string) (io.ReadCloser, api.FileInfo, error) {
	clean, err := cleanPath(p)
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	pfd, err := f.openInRoot(clean, unix.O_PATH)
	if err != nil {
		return nil, api.FileInfo{}, classify("open", clean, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil {
		return nil, api.FileInfo{}, classify("open", clean, err)
	}
	if err := checkRegular(clean, &st); err != nil {
		return nil, api.FileInfo{}, err
	}
	// O_NONBLOCK: should the name be swapped for a FIFO meanwhile, open does not hang.
	fd, err := f.openInRoot(clean, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, api.FileInfo{}, classify("open", clean, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, api.FileInfo{}, classify("open", clean, err)
	}
	if err := checkRegular(clean, &st); err != nil {
		unix.Close(fd)
		return nil, api.FileInfo{}, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, api.FileInfo{}, classify("open", clean, err)
	}
	return os.NewFile(uintptr(fd), clean), f.shown(fileInfo(clean, &st, "")), nil
}

// checkRegular refuses anything but a regular file.
func checkRegular(clean string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return errdefs.Invalid("open %s: is a directory", clean)
	default:
		return errdefs.Invalid("open %s: not a regular file", clean)
	}
}

// Stat describes path without following a final symlink.
func (f *FS) Stat(p string) (api.FileInfo, error) {
	clean, err := cleanPath(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	var st unix.Stat_t
	if clean == "/" {
		if err := unix.Fstat(f.rootFD(), &st); err != nil {
			return api.FileInfo{}, classify("stat", clean, err)
		}
		return f.shown(fileInfo(clean, &st, "")), nil
	}
	dirfd, base, err := f.openParent("stat", clean)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	fi, err := lstatAt(dirfd, base, clean)
	return f.shown(fi), err
}

// lstatAt describes entry name of dirfd (shown as sandbox path p) without following
// it, reading the target of a symlink.
func lstatAt(dirfd int, name, p string) (api.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return api.FileInfo{}, classify("stat", p, err)
	}
	link := ""
	if isType(&st, unix.S_IFLNK) {
		var err error
		if link, err = readlinkat(dirfd, name); err != nil {
			return api.FileInfo{}, classify("readlink", p, err)
		}
	}
	fi := fileInfo(p, &st, link)
	fi.Xattrs = userXattrsAt(dirfd, name, &st)
	return fi, nil
}

// List lists a directory, sorted by name. The directory itself is found following
// symlinks inside the root; its entries are described without following them.
// Entries that vanish while listing are left out.
func (f *FS) List(p string) ([]api.FileInfo, error) {
	clean, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	fd, err := f.openInRoot(clean, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, classify("list", clean, err)
	}
	dir := os.NewFile(uintptr(fd), clean)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, classify("list", clean, err)
	}
	slices.Sort(names)
	out := make([]api.FileInfo, 0, len(names))
	for _, name := range names {
		info, err := lstatAt(fd, name, path.Join(clean, name))
		if errdefs.Is(err, api.CodeNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f.shown(info))
	}
	return out, nil
}
