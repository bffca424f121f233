package fsops

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// ListXattrs returns the extended attributes of p (not following a symlink),
// nil where the file system has none. An attribute that vanishes or cannot be
// read meanwhile is left out.
func ListXattrs(p string) (map[string]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if k == "" {
			continue
		}
		vs, err := unix.Lgetxattr(p, k, nil)
		if err != nil {
			continue // raced away or not readable
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, k, v)
		if err != nil {
			continue
		}
		out[k] = string(v[:vs])
	}
	return out, nil
}
