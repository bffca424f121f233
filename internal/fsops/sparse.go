package fsops

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Holes is how many of a regular file's bytes no storage backs: its size
// beyond its allocated blocks (0 for a dense file). A sandbox can claim any
// size with `truncate -s 1T` in a small writable layer; a copy that writes
// holes out as zeros (a tar stream, an EROFS layer) is bounded by budgeting
// these bytes.
func Holes(st *unix.Stat_t) int64 {
	if h := st.Size - st.Blocks*512; h > 0 {
		return h
	}
	return 0
}

// CopySparse copies size bytes of src into dst (both regular files, dst
// empty) keeping src's holes: it copies only the data extents (SEEK_DATA,
// SEEK_HOLE, copy_file_range in the kernel) and sets dst's size. It returns
// the data bytes copied. A file system without SEEK_DATA is copied densely.
func CopySparse(dst, src *os.File, size int64) (int64, error) {
	var copied int64
	in, out := int(src.Fd()), int(dst.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole is left
			break
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			data = off // no SEEK_DATA here: all data
		} else if err != nil {
			return copied, err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		if data >= hole {
			break
		}
		n, err := copyRange(out, in, dst, src, data, hole-data)
		copied += n
		if err != nil {
			return copied, err
		}
		off = hole
	}
	return copied, dst.Truncate(size)
}

// copyRange copies n bytes at off from in to the same offset of out, in the
// kernel where it can.
func copyRange(out, in int, dst, src *os.File, off, n int64) (int64, error) {
	var done int64
	for done < n {
		roff, woff := off+done, off+done
		c, err := unix.CopyFileRange(in, &roff, out, &woff, int(min(n-done, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				m, err := io.Copy(io.NewOffsetWriter(dst, off+done), io.NewSectionReader(src, off+done, n-done))
				return done + m, err
			}
			return done, err
		}
		if c == 0 { // the source shrank
			return done, nil
		}
		done += int64(c)
	}
	return done, nil
}
