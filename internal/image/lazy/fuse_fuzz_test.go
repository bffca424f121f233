package lazy

import (
	"log/slog"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// oneFile is a fuseFS with one 100,000-byte file, "blob", node 2.
type oneFile struct{}

func (oneFile) lookup(name string) (fileAttr, bool) {
	if name != "blob" {
		return fileAttr{}, false
	}
	return fileAttr{ino: 2, size: 100000, mode: syscall.S_IFREG | 0o444, nlink: 1}, true
}

func (o oneFile) getattr(node uint64) (fileAttr, bool) {
	switch node {
	case fuseRootID:
		return fileAttr{ino: 1, mode: syscall.S_IFDIR | 0o755, nlink: 2}, true
	case 2:
		return o.lookup("blob")
	}
	return fileAttr{}, false
}

func (oneFile) read(node uint64, dest []byte, off int64) (int, syscall.Errno) {
	if node != 2 {
		return 0, syscall.ESTALE
	}
	n := 0
	for ; n < len(dest) && off+int64(n) < 100000; n++ {
		dest[n] = byte(off + int64(n))
	}
	return n, 0
}

func (oneFile) names() []dirName { return []dirName{{"blob", 2}} }

func fuseRequest(op uint32, node uint64, body ...byte) []byte {
	b := make([]byte, inHeaderSize+len(body))
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], op)
	le.PutUint64(b[8:], 7)
	le.PutUint64(b[16:], node)
	copy(b[inHeaderSize:], body)
	return b
}

// FuzzFuseRequest feeds arbitrary requests to the FUSE server's handlers (the
// kernel is trusted, but a malformed request must get an error answer, never a
// panic or a huge allocation). Replies go to a socket drained in the background.
func FuzzFuseRequest(f *testing.F) {
	read := make([]byte, 40)
	le.PutUint64(read[8:], 4096)
	le.PutUint32(read[16:], 8192)
	f.Add(fuseRequest(opLookup, 1, []byte("blob\x00")...))
	f.Add(fuseRequest(opGetattr, 2, make([]byte, 16)...))
	f.Add(fuseRequest(opOpen, 2, make([]byte, 8)...))
	f.Add(fuseRequest(opRead, 2, read...))
	f.Add(fuseRequest(opReaddir, 1, read...))
	f.Add(fuseRequest(opStatfs, 1))
	f.Add(fuseRequest(opInit, 0, make([]byte, 64)...))
	f.Add([]byte("garbage"))
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	go func() {
		buf := make([]byte, 256<<10)
		for {
			if _, err := unix.Read(fds[1], buf); err != nil && err != unix.EINTR {
				return
			}
		}
	}()
	s := newFuseServer(fds[0], oneFile{}, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := parseInHeader(b)
		if !ok {
			return
		}
		s.handle(h, b[inHeaderSize:])
	})
}
