package lazy

import (
	"encoding/binary"
	"syscall"
)

// The subset of the kernel's FUSE protocol (include/uapi/linux/fuse.h) that
// layerd's file system needs: one flat read-only directory of regular files.
// layerd speaks it itself rather than through a FUSE library because a
// restarted layerd must resume a connection whose INIT was answered by its
// predecessor, under the node IDs the kernel already holds (see fuseserver.go).

const (
	fuseKernelMajor = 7
	// fuseKernelMinor is the protocol minor layerd answers INIT with (7.40 added
	// FUSE_NOTIFY_RESEND). The kernel uses the smaller of its own and this one;
	// every structure layerd exchanges has had its current size since 7.23.
	fuseKernelMinor = 40

	fuseRootID = 1

	inHeaderSize  = 40
	outHeaderSize = 16
	attrSize      = 88
	entryOutSize  = 40 + attrSize
	attrOutSize   = 16 + attrSize
	openOutSize   = 16
	initOutSize   = 64
	statfsOutSize = 80
	// fuseMinReadBuffer is the kernel's minimum for a read of /dev/fuse.
	fuseMinReadBuffer = 8192
)

// Opcodes.
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opStatfs      = 17
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
)

// INIT flags (fuse_init_in.flags, and flags2 << 32 with initExt).
const (
	initAsyncRead      = 1 << 0
	initBigWrites      = 1 << 5
	initParallelDirops = 1 << 18
	initMaxPages       = 1 << 22
	initExt            = 1 << 30
	// initHasResend (flags2 bit 7) is the kernel announcing FUSE_NOTIFY_RESEND.
	initHasResend = 1 << 39
)

// Notifications (fuse_out_header.error of an unsolicited write).
const (
	notifyInvalEntry = 3
	notifyResend     = 7
)

const (
	fopenKeepCache = 1 << 1
	// uniqueResend marks a request the kernel sent again after FUSE_NOTIFY_RESEND.
	uniqueResend = 1 << 63
)

var le = binary.LittleEndian

// inHeader is fuse_in_header.
type inHeader struct {
	length uint32
	opcode uint32
	unique uint64
	nodeID uint64
}

func parseInHeader(b []byte) (inHeader, bool) {
	if len(b) < inHeaderSize {
		return inHeader{}, false
	}
	h := inHeader{length: le.Uint32(b[0:]), opcode: le.Uint32(b[4:]), unique: le.Uint64(b[8:]), nodeID: le.Uint64(b[16:])}
	return h, int(h.length) == len(b)
}

// putOutHeader writes fuse_out_header for a reply of total bytes.
func putOutHeader(b []byte, total int, errno syscall.Errno, unique uint64) {
	le.PutUint32(b[0:], uint32(total))
	le.PutUint32(b[4:], uint32(-int32(errno)))
	le.PutUint64(b[8:], unique)
}

// putNotifyHeader writes the header of a notification (unique 0, the code in
// the error field).
func putNotifyHeader(b []byte, total int, code int32) {
	le.PutUint32(b[0:], uint32(total))
	le.PutUint32(b[4:], uint32(code))
	le.PutUint64(b[8:], 0)
}

// fileAttr is what layerd says about a node (fuse_attr).
type fileAttr struct {
	ino   uint64
	size  uint64
	mode  uint32
	nlink uint32
}

func putAttr(b []byte, a fileAttr) {
	clear(b[:attrSize])
	le.PutUint64(b[0:], a.ino)
	le.PutUint64(b[8:], a.size)
	le.PutUint64(b[16:], (a.size+511)/512)
	le.PutUint32(b[60:], a.mode)
	le.PutUint32(b[64:], a.nlink)
}
