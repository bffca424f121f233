package trajectory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ErrBoltDamaged marks a bbolt log that fails the check made before opening
// it: bbolt itself would panic or fault on it (a page past the end of a
// truncated file is read through its mmap and kills the process with SIGBUS;
// an inconsistent tree panics in a goroutine of bbolt's own).
var ErrBoltDamaged = errors.New("the file is damaged")

// The bbolt file layout the check reads (go.etcd.io/bbolt/internal/common,
// format version 2, stored in the machine's byte order: little endian on
// every platform dsec builds for).
const (
	bcPageHeader   = 16 // id u64, flags u16, count u16, overflow u32
	bcElem         = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	bcBucketHeader = 16 // root pgid u64, sequence u64
	bcBranch       = 0x01
	bcLeaf         = 0x02
	bcMeta         = 0x04
	bcFreelist     = 0x10
	bcBucketLeaf   = 0x01
	bcMagic        = 0xED0CDAED
	bcVersion      = 2
	bcNoFreelist   = ^uint64(0)
	bcDefaultPage  = 4096
	bcMaxPage      = 1 << 20
)

var le = binary.LittleEndian

// damaged is the error for a log that failed the check: what is wrong and
// what to do, classified internal (the node cannot serve its log).
func damaged(path, format string, args ...any) error {
	return errdefs.Wrap(api.CodeInternal,
		fmt.Errorf("%w: it was not opened and is left as it is; move it aside (mv %s %s.damaged) "+
			"to start with an empty log, keeping the damaged file for inspection", ErrBoltDamaged, path, path),
		"trajectory log %s: %s", path, fmt.Sprintf(format, args...))
}

// checkBolt checks the bbolt file at path before bbolt opens it: first by
// reading it (no mmap) and following every page reference of the tree and
// the freelist within the file's bounds, so that nothing bbolt later reads
// through its mmap lies past the end of the file; then with bbolt's own
// consistency check (tx.Check) on a read-only open. A missing file passes
// (bbolt creates it). The file is never written. A live server holding the
// file makes it wait up to timeout, then fail as bbolt's own open does.
func checkBolt(path string, timeout time.Duration) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open trajectory log %s: %w", path, err)
	}
	defer f.Close()
	// A shared lock: a server writing the file holds it exclusively.
	if err := flockShared(f, timeout); err != nil {
		return fmt.Errorf("open trajectory log %s: %w", path, err)
	}
	torn, err := walkBolt(f, path, nil)
	if err != nil || torn {
		// bbolt's check asserts both meta pages; one torn by a crash
		// mid-commit is no damage (bbolt uses the other, the previous
		// commit, and the next commit rewrites it).
		return err
	}
	return boltTxCheck(path, timeout)
}

func flockShared(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return bolt.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond) // the lock holder is another process: nothing to wait on
	}
}

// boltTxCheck runs bbolt's consistency check on a read-only open of a file
// walkBolt passed (every page it can reach lies within the file, so bbolt's
// reads through its mmap cannot fault). bbolt recovers panics of the check
// into errors; a panic of the open itself is recovered here.
func boltTxCheck(path string, timeout time.Duration) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, "bbolt panicked reading it: %v", r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return fmt.Errorf("open trajectory log %s: %w", path, err)
		}
		return damaged(path, "bbolt cannot open it: %v", err)
	}
	defer db.Close()
	var problems []error
	if err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			if len(problems) < 5 {
				problems = append(problems, e)
			}
		}
		return nil
	}); err != nil {
		return damaged(path, "bbolt cannot read it: %v", err)
	}
	if len(problems) > 0 {
		return damaged(path, "bbolt's consistency check: %v", errors.Join(problems...))
	}
	return nil
}

// boltWalk is one check of a file's pages by plain reads.
type boltWalk struct {
	f        *os.File
	path     string
	pageSize int
	hwm      uint64 // the meta's high water mark: pages [0, hwm) are in use
	seen     map[uint64]bool
	visit    func(id uint64, flags uint16) // when set, called for each page read
}

// walkBolt checks the meta pages, the freelist and every page of every bucket
// of the file open at f without bbolt (visit: see boltWalk). torn: one meta
// page is invalid (bbolt uses the other).
func walkBolt(f *os.File, path string, visit func(id uint64, flags uint16)) (torn bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("open trajectory log %s: %w", path, err)
	}
	size := st.Size()
	if size == 0 {
		return false, damaged(path, "the file is empty")
	}
	// Meta page 0 at offset 0 names the page size; meta page 1 follows it.
	m0, err0 := readBoltMeta(f, 0)
	pageSize := bcDefaultPage
	if err0 == nil {
		pageSize = int(m0.pageSize)
	}
	m1, err1 := readBoltMeta(f, int64(pageSize))
	if err0 != nil && err1 == nil && int(m1.pageSize) != pageSize {
		err1 = fmt.Errorf("page size %d", m1.pageSize)
	}
	// bbolt uses the valid meta of the highest transaction.
	var m boltMeta
	switch {
	case err0 != nil && err1 != nil:
		return false, damaged(path, "both meta pages are invalid: page 0: %v; page 1: %v", err0, err1)
	case err0 == nil && (err1 != nil || m0.txid >= m1.txid):
		m = m0
	default:
		m = m1
	}
	if m.pgid < 4 || m.pgid > uint64(size)/uint64(pageSize) {
		return false, damaged(path, "the meta of transaction %d counts %d pages of %d bytes, the file holds %d bytes (truncated?)",
			m.txid, m.pgid, pageSize, size)
	}
	w := &boltWalk{f: f, path: path, pageSize: pageSize, hwm: m.pgid, seen: map[uint64]bool{0: true, 1: true}, visit: visit}
	if m.freelist != bcNoFreelist {
		if err := w.freelist(m.freelist); err != nil {
			return false, err
		}
	}
	return err0 != nil || err1 != nil, w.tree(m.root, 0)
}

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readBoltMeta reads and validates (magic, version, checksum) the meta page at off.
func readBoltMeta(f *os.File, off int64) (boltMeta, error) {
	b := make([]byte, bcPageHeader+64)
	if _, err := f.ReadAt(b, off); err != nil {
		if errors.Is(err, io.EOF) {
			return boltMeta{}, errors.New("past the end of the file")
		}
		return boltMeta{}, err
	}
	if le.Uint16(b[8:]) != bcMeta {
		return boltMeta{}, fmt.Errorf("not a meta page (flags %#x)", le.Uint16(b[8:]))
	}
	d := b[bcPageHeader:]
	h := fnv.New64a()
	h.Write(d[:56])
	switch {
	case le.Uint32(d[0:]) != bcMagic:
		return boltMeta{}, errors.New("no bbolt magic")
	case le.Uint32(d[4:]) != bcVersion:
		return boltMeta{}, fmt.Errorf("format version %d", le.Uint32(d[4:]))
	case le.Uint64(d[56:]) != h.Sum64():
		return boltMeta{}, errors.New("checksum mismatch")
	}
	m := boltMeta{pageSize: le.Uint32(d[8:]), root: le.Uint64(d[16:]), freelist: le.Uint64(d[32:]),
		pgid: le.Uint64(d[40:]), txid: le.Uint64(d[48:])}
	if m.pageSize < 512 || m.pageSize > bcMaxPage || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d", m.pageSize)
	}
	return m, nil
}

// page reads page id with its overflow pages, checking that it lies within
// the high water mark, is referenced once, and carries its own id and one of
// the flags in want.
func (w *boltWalk) page(id uint64, want uint16, from string) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, damaged(w.path, "%s refers to page %d, outside the pages in use [2, %d)", from, id, w.hwm)
	}
	hdr := make([]byte, bcPageHeader)
	if _, err := w.f.ReadAt(hdr, int64(id)*int64(w.pageSize)); err != nil {
		return nil, damaged(w.path, "page %d: %v", id, err)
	}
	if got := le.Uint64(hdr); got != id {
		return nil, damaged(w.path, "page %d (from %s) holds page id %d", id, from, got)
	}
	if flags := le.Uint16(hdr[8:]); flags&want == 0 || flags&^want != 0 || flags&(flags-1) != 0 {
		return nil, damaged(w.path, "page %d (from %s) has flags %#x, want %#x", id, from, flags, want)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= w.hwm {
		return nil, damaged(w.path, "page %d (from %s) runs %d pages past the pages in use", id, from, id+overflow+1-w.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, damaged(w.path, "page %d (from %s) is referenced twice", i, from)
		}
		w.seen[i] = true
	}
	if w.visit != nil {
		w.visit(id, le.Uint16(hdr[8:]))
	}
	b := make([]byte, int(overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(b, int64(id)*int64(w.pageSize)); err != nil {
		return nil, damaged(w.path, "page %d: %v", id, err)
	}
	return b, nil
}

// freelist checks the freelist page: every free page id is one in use.
func (w *boltWalk) freelist(id uint64) error {
	b, err := w.page(id, bcFreelist, "the meta's freelist")
	if err != nil {
		return err
	}
	n, start := uint64(le.Uint16(b[10:])), bcPageHeader
	if n == 0xFFFF {
		n, start = le.Uint64(b[bcPageHeader:]), bcPageHeader+8
	}
	if n > uint64(len(b)-start)/8 {
		return damaged(w.path, "freelist page %d counts %d free pages, more than it holds", id, n)
	}
	for i := range n {
		if free := le.Uint64(b[start+int(i)*8:]); free < 2 || free >= w.hwm {
			return damaged(w.path, "freelist page %d lists page %d, outside the pages in use [2, %d)", id, free, w.hwm)
		}
	}
	return nil
}

// tree checks the bucket whose root is page id and every bucket in it.
func (w *boltWalk) tree(id uint64, depth int) error {
	b, err := w.page(id, bcBranch|bcLeaf, "a bucket")
	if err != nil {
		return err
	}
	return w.node(b, id, depth)
}

// node checks the branch or leaf page b (page id; 0: inline in a bucket's value).
func (w *boltWalk) node(b []byte, id uint64, depth int) error {
	if depth > 64 {
		return damaged(w.path, "page %d: the tree is deeper than 64", id)
	}
	flags, n := le.Uint16(b[8:]), int(le.Uint16(b[10:]))
	if bcPageHeader+n*bcElem > len(b) {
		return damaged(w.path, "page %d counts %d elements, more than it holds", id, n)
	}
	var prev []byte
	for i := range n {
		e := bcPageHeader + i*bcElem
		var pos, ksize, vsize uint64
		if flags == bcBranch {
			pos, ksize = uint64(le.Uint32(b[e:])), uint64(le.Uint32(b[e+4:]))
		} else {
			pos, ksize, vsize = uint64(le.Uint32(b[e+4:])), uint64(le.Uint32(b[e+8:])), uint64(le.Uint32(b[e+12:]))
		}
		if uint64(e)+pos+ksize+vsize > uint64(len(b)) {
			return damaged(w.path, "page %d element %d lies past the page's end", id, i)
		}
		key := b[uint64(e)+pos:][:ksize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return damaged(w.path, "page %d: keys out of order at element %d", id, i)
		}
		prev = key
		if flags == bcBranch {
			if err := w.tree(le.Uint64(b[e+8:]), depth+1); err != nil {
				return err
			}
			continue
		}
		if le.Uint32(b[e:])&bcBucketLeaf == 0 {
			continue
		}
		v := b[uint64(e)+pos+ksize:][:vsize]
		if len(v) < bcBucketHeader {
			return damaged(w.path, "page %d element %d: a bucket of %d bytes", id, i, len(v))
		}
		if root := le.Uint64(v); root != 0 {
			if err := w.tree(root, depth+1); err != nil {
				return err
			}
			continue
		}
		// An inline bucket: its leaf page follows the header in the value.
		inl := v[bcBucketHeader:]
		if len(inl) < bcPageHeader || le.Uint16(inl[8:]) != bcLeaf {
			return damaged(w.path, "page %d element %d: an inline bucket without its leaf page", id, i)
		}
		if err := w.node(inl, id, depth+1); err != nil {
			return err
		}
	}
	return nil
}
