package layer

import (
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	erofs "github.com/erofs/go-erofs"
)

// Hard links. go-erofs v0.3.1's Writer gives every name an inode of its own.
// A layer keeps a hard link's identity this way: the first name of an inode
// (the group's primary) holds the content and metadata; every other name is
// written as an empty regular file (a placeholder, so the content is stored
// once) and the primary's link count is set to the number of names. After
// go-erofs has written the image, relink points each placeholder name's
// directory entry at the primary's inode (EROFS's on-disk format, the
// kernel's fs/erofs/erofs_fs.h: a directory's data is blocks of 12-byte
// entries {le64 nid, le16 nameoff, u8 file_type, u8 reserved} followed by
// their names; an inode is found at meta_blkaddr * block size + nid * 32).
// The placeholders' 32-byte inodes stay in the metadata, referenced by no
// name, and the superblock's inode count leaves them out. (go-erofs refuses
// a second entry at a path, so a name of a group is never replaced.)

// linkGroup is the names of one multiply-linked inode.
type linkGroup struct {
	primary string   // holds the inode's content and metadata
	others  []string // placeholders, pointed at primary's inode when written
}

// links is the builder's hard-link state.
type links struct {
	byName map[string]*linkGroup // every name of a group → its group
	groups []*linkGroup          // in creation order (deterministic output)
}

// group returns the group target (an already-written regular file) is a
// name of, making one with target as its primary if there is none.
func (l *links) group(target string) *linkGroup {
	if g := l.byName[target]; g != nil {
		return g
	}
	if l.byName == nil {
		l.byName = map[string]*linkGroup{}
	}
	g := &linkGroup{primary: target}
	l.byName[target] = g
	l.groups = append(l.groups, g)
	return g
}

func (l *links) add(g *linkGroup, name string) {
	g.others = append(g.others, name)
	l.byName[name] = g
}

// setLinkCounts sets each primary's link count (before the writer's Close).
func (b *builder) setLinkCounts() error {
	for _, g := range b.links.groups {
		if len(g.others) == 0 {
			continue
		}
		if err := b.w.SetNlink(g.primary, uint32(1+len(g.others))); err != nil {
			return fmt.Errorf("hard link %s: %w", g.primary, err)
		}
	}
	return nil
}

// relink points every placeholder's directory entry in the image go-erofs
// wrote to f at its primary's inode, then reads each name back to check it.
func (b *builder) relink(f interface {
	io.ReaderAt
	io.WriterAt
}) error {
	var patches int
	for _, g := range b.links.groups {
		patches += len(g.others)
	}
	if patches == 0 {
		return nil
	}
	fsys, err := erofs.Open(f)
	if err != nil {
		return err
	}
	img, err := readSuper(f)
	if err != nil {
		return err
	}
	nid := func(name string) (uint64, error) {
		p := strings.TrimPrefix(name, "/")
		if p == "" {
			p = "."
		}
		fi, err := fs.Stat(fsys, p)
		if err != nil {
			return 0, err
		}
		st, ok := fi.Sys().(*erofs.Stat)
		if !ok {
			return 0, fmt.Errorf("%s: no inode number", name)
		}
		return uint64(st.Ino), nil
	}
	type check struct {
		name string
		nid  uint64
	}
	var checks []check
	for _, g := range b.links.groups {
		target, err := nid(g.primary)
		if err != nil {
			return fmt.Errorf("hard link %s: %w", g.primary, err)
		}
		for _, name := range g.others {
			dir, err := nid(path.Dir(name))
			if err != nil {
				return fmt.Errorf("hard link %s: %w", name, err)
			}
			off, err := img.direntOffset(dir, path.Base(name))
			if err != nil {
				return fmt.Errorf("hard link %s: %w", name, err)
			}
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], target)
			if _, err := f.WriteAt(v[:], off); err != nil {
				return err
			}
			checks = append(checks, check{name, target})
		}
	}
	// The placeholders' inodes are referenced by no name now.
	var inos [8]byte
	if _, err := f.ReadAt(inos[:], superOffset+16); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(inos[:])
	binary.LittleEndian.PutUint64(inos[:], n-uint64(patches))
	if _, err := f.WriteAt(inos[:], superOffset+16); err != nil {
		return err
	}
	fsys, err = erofs.Open(f) // a fresh reader: no cached directory blocks
	if err != nil {
		return err
	}
	for _, c := range checks {
		if got, err := nid(c.name); err != nil || got != c.nid {
			return fmt.Errorf("hard link %s: inode %d after relinking, want %d (%v)", c.name, got, c.nid, err)
		}
	}
	return nil
}

const superOffset = 1024 // EROFS_SUPER_OFFSET

// erofsImage is what relink needs of an image's superblock.
type erofsImage struct {
	r        io.ReaderAt
	blkBits  uint8
	metaAddr int64 // byte offset of nid 0
}

func readSuper(r io.ReaderAt) (*erofsImage, error) {
	var sb [128]byte
	if _, err := r.ReadAt(sb[:], superOffset); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(sb[8:12])&1 != 0 {
		// EROFS_FEATURE_COMPAT_SB_CHKSUM: go-erofs does not set it; relink
		// changes the inode count and would have to update the checksum.
		return nil, fmt.Errorf("erofs superblock has a checksum")
	}
	bits := sb[12]
	if bits < 9 || bits > 16 {
		return nil, fmt.Errorf("erofs block size 2^%d", bits)
	}
	return &erofsImage{r: r, blkBits: bits, metaAddr: int64(binary.LittleEndian.Uint32(sb[40:44])) << bits}, nil
}

// direntOffset returns the byte offset of the nid field of directory dir's
// entry name.
func (img *erofsImage) direntOffset(dir uint64, name string) (int64, error) {
	at := img.metaAddr + int64(dir)*32
	var ino [64]byte
	if _, err := img.r.ReadAt(ino[:32], at); err != nil {
		return 0, err
	}
	format := binary.LittleEndian.Uint16(ino[0:2])
	layout := (format >> 1) & 7
	isize, size := int64(32), int64(binary.LittleEndian.Uint32(ino[8:12]))
	if format&1 != 0 { // extended inode
		if _, err := img.r.ReadAt(ino[:], at); err != nil {
			return 0, err
		}
		isize, size = 64, int64(binary.LittleEndian.Uint64(ino[8:16]))
	}
	if mode := binary.LittleEndian.Uint16(ino[4:6]); mode&0o170000 != 0o040000 {
		return 0, fmt.Errorf("nid %d is not a directory (mode %o)", dir, mode)
	}
	var xattrs int64
	if n := int64(binary.LittleEndian.Uint16(ino[2:4])); n > 0 {
		xattrs = 12 + (n-1)*4
	}
	raw := int64(binary.LittleEndian.Uint32(ino[16:20]))
	bs := int64(1) << img.blkBits
	const flatPlain, flatInline = 0, 2
	if layout != flatPlain && layout != flatInline {
		return 0, fmt.Errorf("directory nid %d has data layout %d", dir, layout)
	}
	buf := make([]byte, bs)
	for start := int64(0); start < size; start += bs {
		n := min(bs, size-start)
		off := raw<<img.blkBits + start
		if layout == flatInline && start+bs >= size { // the tail, after the inode
			off = at + isize + xattrs
		}
		blk := buf[:n]
		if _, err := img.r.ReadAt(blk, off); err != nil {
			return 0, err
		}
		if i, ok := findDirent(blk, name); ok {
			return off + int64(i)*12, nil
		}
	}
	return 0, fmt.Errorf("no entry %q in directory nid %d", name, dir)
}

// findDirent returns the index of name's entry in one directory block.
func findDirent(blk []byte, name string) (int, bool) {
	if len(blk) < 12 {
		return 0, false
	}
	count := int(binary.LittleEndian.Uint16(blk[8:10])) / 12
	if count == 0 || count*12 > len(blk) {
		return 0, false
	}
	for i := 0; i < count; i++ {
		start := int(binary.LittleEndian.Uint16(blk[i*12+8:]))
		end := len(blk)
		if i+1 < count {
			end = int(binary.LittleEndian.Uint16(blk[(i+1)*12+8:]))
		}
		if start > end || end > len(blk) {
			return 0, false
		}
		n := blk[start:end]
		if i+1 == count { // the last name runs to the block's end or a NUL
			if z := slices.Index(n, 0); z >= 0 {
				n = n[:z]
			}
		}
		if string(n) == name {
			return i, true
		}
	}
	return 0, false
}
