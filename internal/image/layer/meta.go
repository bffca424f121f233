package layer

import (
	"fmt"
	"io"
	"io/fs"
	"slices"

	erofs "github.com/erofs/go-erofs"
)

// MetaChunks returns, ascending, the chunks (of chunk bytes, of an EROFS image of
// size bytes) that hold anything but regular-file data: the superblock, the
// inode table, directory blocks, xattrs, symlink targets and the data that
// go-erofs inlines after a file's inode (files smaller than a block, less the
// inode: on a Debian base, most of the files).
// It walks the image's tree with go-erofs's reader and takes the data ranges of
// every regular file (go-erofs's DataRange); a chunk not wholly covered by them
// is a metadata chunk. Reading a path's inodes and directory entries on a node
// that has never seen the layer touches only these chunks.
func MetaChunks(r io.ReaderAt, size, chunk int64) ([]int64, error) {
	if chunk <= 0 || size <= 0 {
		return nil, fmt.Errorf("meta chunks: size %d chunk %d", size, chunk)
	}
	sb, err := readSuper(r)
	if err != nil {
		return nil, err
	}
	bs := int64(1) << sb.blkBits
	fsys, err := erofs.Open(r)
	if err != nil {
		return nil, err
	}
	type span struct{ start, end int64 }
	var data []span
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		dr, ok := fi.(interface{ DataRange() []erofs.DataRange })
		if !ok {
			return fmt.Errorf("%s: no data ranges", name)
		}
		for _, rg := range dr.DataRange() {
			if rg.Offset < 0 || rg.Size <= 0 {
				continue
			}
			end := rg.Offset + rg.Size
			if rg.Offset%bs == 0 {
				// Data in blocks of its own: the rest of its last block is padding.
				// (An inline tail follows its inode: never at a block's start.)
				end = (end + bs - 1) / bs * bs
			}
			data = append(data, span{rg.Offset, end})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta chunks: %w", err)
	}
	slices.SortFunc(data, func(a, b span) int { return int(min(max(a.start-b.start, -1), 1)) })
	var meta []int64
	n := (size + chunk - 1) / chunk
	i := 0
	for c := int64(0); c < n; c++ {
		start, end := c*chunk, min((c+1)*chunk, size)
		// Is [start, end) covered by the (sorted) data spans?
		at := start
		for i < len(data) && data[i].end <= start {
			i++
		}
		for j := i; j < len(data) && data[j].start <= at && at < end; j++ {
			at = max(at, data[j].end)
		}
		if at < end {
			meta = append(meta, c)
		}
	}
	return meta, nil
}
