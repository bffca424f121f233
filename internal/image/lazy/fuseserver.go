package lazy

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fuseFS is what layerd's FUSE server serves: a root directory (fuseRootID) whose
// children are the layer blob files, each under a node ID that never changes
// while the FUSE connection lives (it survives layerd restarts, see state.go).
type fuseFS interface {
	lookup(name string) (fileAttr, bool)
	getattr(node uint64) (fileAttr, bool)
	// read fills dest from offset off of node's file; it may block on the blob store.
	read(node uint64, dest []byte, off int64) (int, syscall.Errno)
	// names lists the root's children with their node IDs.
	names() []dirName
}

type dirName struct {
	name string
	node uint64
}

// fuseServer serves one FUSE connection (a /dev/fuse descriptor). The connection
// is not tied to the process: a descriptor passed to another process (the holder,
// holder.go) keeps the mount alive, and whoever holds it can resume serving it,
// with requests the previous server read but never answered sent again by the
// kernel on FUSE_NOTIFY_RESEND (Linux 6.9+).
type fuseServer struct {
	fd  int
	fs  fuseFS
	log *slog.Logger

	bufs  sync.Pool // request buffers
	datas sync.Pool // READ reply buffers
	wg    sync.WaitGroup
	// readers is how many goroutines read requests, idle how many of them wait in
	// read(2) right now.
	readers, idle atomic.Int32
}

const (
	fuseMaxRead    = 128 << 10
	fuseMaxWrite   = 4096 // nothing is written; the kernel sizes read buffers by it
	fuseReqBuf     = 16 << 10
	fuseReaders    = 2              // readers started with the server
	fuseMaxReaders = 16             // readers at most (each may block on the blob store)
	fuseAttrValid  = 24 * time.Hour // blobs are immutable: entries and attributes never go stale
	fuseMaxBgReqs  = 64
	fuseCongestion = 48
)

func newFuseServer(fd int, fs fuseFS, log *slog.Logger) *fuseServer {
	s := &fuseServer{fd: fd, fs: fs, log: log}
	s.bufs.New = func() any { b := make([]byte, fuseReqBuf); return &b }
	s.datas.New = func() any { b := make([]byte, fuseMaxRead); return &b }
	return s
}

// mountFuse opens /dev/fuse and mounts it read-only-ish (nothing can be written:
// every write operation is answered ENOSYS) at dir.
func mountFuse(dir string) (int, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/fuse: %w", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", fd, fuseMaxRead)
	if err := unix.Mount("dsec-layerd", dir, "fuse.dsec", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount fuse at %s: %w", dir, err)
	}
	return fd, nil
}

// handshake answers the kernel's INIT on a fresh connection and reports whether
// the kernel announced FUSE_NOTIFY_RESEND.
func (s *fuseServer) handshake(readAhead int) (resend bool, err error) {
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	for {
		n, err := unix.Read(s.fd, *bp)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("fuse: read INIT: %w", err)
		}
		req := (*bp)[:n]
		h, ok := parseInHeader(req)
		if !ok || h.opcode != opInit || len(req) < inHeaderSize+16 {
			return false, fmt.Errorf("fuse: expected INIT, got opcode %d (%d bytes)", h.opcode, n)
		}
		in := req[inHeaderSize:]
		major, minor := le.Uint32(in[0:]), le.Uint32(in[4:])
		kflags := uint64(le.Uint32(in[12:]))
		if kflags&initExt != 0 && len(in) >= 20 {
			kflags |= uint64(le.Uint32(in[16:])) << 32
		}
		if major != fuseKernelMajor {
			s.reply(h.unique, unix.EPROTO, nil)
			return false, fmt.Errorf("fuse: kernel protocol %d.%d", major, minor)
		}
		out := make([]byte, outHeaderSize+initOutSize)
		b := out[outHeaderSize:]
		le.PutUint32(b[0:], fuseKernelMajor)
		le.PutUint32(b[4:], min(minor, fuseKernelMinor))
		le.PutUint32(b[8:], uint32(readAhead))
		want := uint64(initAsyncRead | initBigWrites | initParallelDirops | initMaxPages)
		le.PutUint32(b[12:], uint32(want&kflags))
		le.PutUint16(b[16:], fuseMaxBgReqs)
		le.PutUint16(b[18:], fuseCongestion)
		le.PutUint32(b[20:], fuseMaxWrite)
		le.PutUint32(b[24:], 1)                                      // time granularity (ns)
		le.PutUint16(b[28:], uint16(fuseMaxRead/unix.Getpagesize())) // max pages per request
		putOutHeader(out, len(out), 0, h.unique)
		if _, err := unix.Write(s.fd, out); err != nil {
			return false, fmt.Errorf("fuse: answer INIT: %w", err)
		}
		return kflags&initHasResend != 0, nil
	}
}

// resend asks the kernel to queue again every request a previous server read and
// never answered (FUSE_NOTIFY_RESEND).
func (s *fuseServer) resend() error {
	var out [outHeaderSize]byte
	putNotifyHeader(out[:], len(out), notifyResend)
	if _, err := unix.Write(s.fd, out[:]); err != nil {
		return fmt.Errorf("fuse: notify resend: %w", err)
	}
	return nil
}

// invalEntry drops the kernel's cached entry for name in the root.
func (s *fuseServer) invalEntry(name string) error {
	out := make([]byte, outHeaderSize+16+len(name)+1)
	le.PutUint64(out[outHeaderSize:], fuseRootID)
	le.PutUint32(out[outHeaderSize+8:], uint32(len(name)))
	copy(out[outHeaderSize+16:], name)
	putNotifyHeader(out, len(out), notifyInvalEntry)
	_, err := unix.Write(s.fd, out)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("fuse: invalidate %s: %w", name, err)
	}
	return nil
}

// serve starts the readers; they end when the connection goes away (unmount).
func (s *fuseServer) serve() {
	for i := 0; i < fuseReaders; i++ {
		s.addReader()
	}
}

func (s *fuseServer) addReader() {
	s.readers.Add(1)
	s.wg.Add(1)
	go s.readLoop()
}

// wait returns once every reader has ended.
func (s *fuseServer) wait() { s.wg.Wait() }

// waitFor is wait for at most d.
func (s *fuseServer) waitFor(d time.Duration) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func (s *fuseServer) readLoop() {
	defer s.wg.Done()
	defer s.readers.Add(-1)
	for {
		bp := s.bufs.Get().(*[]byte)
		s.idle.Add(1)
		n, err := unix.Read(s.fd, *bp)
		idle := s.idle.Add(-1)
		switch {
		case err == nil:
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
			s.bufs.Put(bp)
			continue
		case errors.Is(err, unix.ENODEV): // unmounted or aborted
			s.bufs.Put(bp)
			return
		default:
			s.log.Error("fuse: read request", "err", err)
			s.bufs.Put(bp)
			return
		}
		req := (*bp)[:n]
		h, ok := parseInHeader(req)
		if !ok {
			s.log.Error("fuse: short request", "bytes", n)
			s.bufs.Put(bp)
			continue
		}
		// Requests are answered by the goroutine that read them (no hand-off to
		// another goroutine on the read path); only reads may block (on the blob
		// store), so before one, a reader makes sure another waits for requests.
		if h.opcode == opRead && idle == 0 && s.readers.Load() < fuseMaxReaders {
			s.addReader()
		}
		s.handle(h, req[inHeaderSize:])
		s.bufs.Put(bp)
	}
}

func (s *fuseServer) handle(h inHeader, in []byte) {
	switch h.opcode {
	case opForget, opBatchForget, opInterrupt:
		// No reply. Node IDs are never reused, so forgets need no bookkeeping;
		// an interrupted read finishes anyway (its data lands in the cache).
	case opLookup:
		name := cstring(in)
		a, ok := s.fs.lookup(name)
		if !ok {
			s.reply(h.unique, unix.ENOENT, nil)
			return
		}
		var b [entryOutSize]byte
		le.PutUint64(b[0:], a.ino)
		le.PutUint64(b[8:], 1) // generation
		valid := uint64(fuseAttrValid / time.Second)
		le.PutUint64(b[16:], valid)
		le.PutUint64(b[24:], valid)
		putAttr(b[40:], a)
		s.reply(h.unique, 0, b[:])
	case opGetattr:
		a, ok := s.fs.getattr(h.nodeID)
		if !ok {
			s.reply(h.unique, unix.ENOENT, nil)
			return
		}
		var b [attrOutSize]byte
		le.PutUint64(b[0:], uint64(fuseAttrValid/time.Second))
		putAttr(b[16:], a)
		s.reply(h.unique, 0, b[:])
	case opOpen:
		if len(in) < 8 {
			s.reply(h.unique, unix.EINVAL, nil)
			return
		}
		if le.Uint32(in[0:])&(unix.O_WRONLY|unix.O_RDWR) != 0 {
			s.reply(h.unique, unix.EROFS, nil)
			return
		}
		if _, ok := s.fs.getattr(h.nodeID); !ok {
			s.reply(h.unique, unix.ENOENT, nil)
			return
		}
		var b [openOutSize]byte
		// The blob never changes: the kernel keeps its page cache across opens.
		le.PutUint32(b[8:], fopenKeepCache)
		s.reply(h.unique, 0, b[:])
	case opOpendir:
		s.reply(h.unique, 0, make([]byte, openOutSize))
	case opRead:
		s.handleRead(h, in)
	case opReaddir:
		s.handleReaddir(h, in)
	case opRelease, opReleasedir, opFlush, opDestroy:
		s.reply(h.unique, 0, nil)
	case opStatfs:
		var b [statfsOutSize]byte
		le.PutUint32(b[40:], 4096) // bsize
		le.PutUint32(b[44:], 255)  // namelen
		le.PutUint32(b[48:], 4096) // frsize
		s.reply(h.unique, 0, b[:])
	case opInit:
		s.log.Error("fuse: INIT on a running connection")
		s.reply(h.unique, unix.EPROTO, nil)
	default:
		s.reply(h.unique, unix.ENOSYS, nil)
	}
}

func (s *fuseServer) handleRead(h inHeader, in []byte) {
	if len(in) < 24 {
		s.reply(h.unique, unix.EINVAL, nil)
		return
	}
	off := int64(le.Uint64(in[8:]))
	size := int(le.Uint32(in[16:]))
	if size > fuseMaxRead || off < 0 {
		// More than the max_read the mount was made with: not from the kernel.
		s.reply(h.unique, unix.EINVAL, nil)
		return
	}
	dp := s.datas.Get().(*[]byte)
	defer s.datas.Put(dp)
	n, errno := s.fs.read(h.nodeID, (*dp)[:size], off)
	if errno != 0 {
		s.reply(h.unique, errno, nil)
		return
	}
	s.reply(h.unique, 0, (*dp)[:n])
}

func (s *fuseServer) handleReaddir(h inHeader, in []byte) {
	if h.nodeID != fuseRootID || len(in) < 24 {
		s.reply(h.unique, unix.ENOTDIR, nil)
		return
	}
	off := le.Uint64(in[8:])
	size := int(le.Uint32(in[16:]))
	ents := append([]dirName{{".", fuseRootID}, {"..", fuseRootID}}, s.fs.names()...)
	var out []byte
	for i := off; i < uint64(len(ents)); i++ {
		e := ents[i]
		rec := (24 + len(e.name) + 7) &^ 7
		if len(out)+rec > size {
			break
		}
		b := make([]byte, rec)
		le.PutUint64(b[0:], e.node)
		le.PutUint64(b[8:], i+1) // offset of the next entry
		le.PutUint32(b[16:], uint32(len(e.name)))
		typ := uint32(unix.DT_REG)
		if e.node == fuseRootID {
			typ = unix.DT_DIR
		}
		le.PutUint32(b[20:], typ)
		copy(b[24:], e.name)
		out = append(out, b...)
	}
	s.reply(h.unique, 0, out)
}

// reply answers request unique. A request the kernel no longer waits for (its
// caller was interrupted, ENOENT) needs nothing more.
func (s *fuseServer) reply(unique uint64, errno syscall.Errno, data []byte) {
	var hdr [outHeaderSize]byte
	if errno != 0 {
		data = nil
	}
	putOutHeader(hdr[:], outHeaderSize+len(data), errno, unique)
	var err error
	if len(data) == 0 {
		_, err = unix.Write(s.fd, hdr[:])
	} else {
		_, err = unix.Writev(s.fd, [][]byte{hdr[:], data})
	}
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		s.log.Warn("fuse: reply", "unique", unique, "err", err)
	}
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
