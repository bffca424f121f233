package fsops

import (
	"errors"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// errNoSpaceMsg is the message of ENOSPC/EDQUOT errors.
const errNoSpaceMsg = "writable layer full"

// classify wraps a syscall error for operation op on sandbox path p with the error
// class its errno implies (see the package doc). Messages only ever name sandbox
// paths, never host paths.
func classify(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var en unix.Errno
	if !errors.As(err, &en) {
		return errdefs.Internal(err, "%s %s", op, p)
	}
	switch en {
	case unix.ENOENT:
		return errdefs.Wrap(api.CodeNotFound, err, "%s %s", op, p)
	case unix.EEXIST:
		return errdefs.Wrap(api.CodeAlreadyExists, err, "%s %s", op, p)
	case unix.ENOTEMPTY, unix.EBUSY, unix.ETXTBSY:
		return errdefs.Wrap(api.CodeConflict, err, "%s %s", op, p)
	case unix.ENOSPC, unix.EDQUOT:
		return errdefs.Wrap(api.CodeResourceExhausted, err, "%s %s: %s", op, p, errNoSpaceMsg)
	case unix.ENOTDIR, unix.EISDIR, unix.EINVAL, unix.ELOOP, unix.ENAMETOOLONG,
		unix.EXDEV, unix.EACCES, unix.EPERM, unix.EROFS, unix.EFBIG, unix.EMLINK:
		return errdefs.Wrap(api.CodeInvalidArgument, err, "%s %s", op, p)
	default:
		return errdefs.Internal(err, "%s %s", op, p)
	}
}

// isErrno reports whether err is (or wraps) one of the given errnos.
func isErrno(err error, errnos ...unix.Errno) bool {
	var en unix.Errno
	if !errors.As(err, &en) {
		return false
	}
	for _, e := range errnos {
		if en == e {
			return true
		}
	}
	return false
}

// inputErr classifies an error from the caller's data (an upload body or archive):
// a body over the HTTP layer's limit (http.MaxBytesError) is payload_too_large, an
// already classified error keeps its class (e.g. deadline_exceeded), anything else
// (a broken stream, a client gone) is invalid_argument.
func inputErr(op, p string, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errdefs.Wrap(api.CodePayloadTooLarge, err, "%s %s: more than %d bytes", op, p, mbe.Limit)
	}
	if code := errdefs.CodeOf(err); code != api.CodeInternal {
		return errdefs.Wrap(code, err, "%s %s", op, p)
	}
	return errdefs.Wrap(api.CodeInvalidArgument, err, "%s %s: reading the data", op, p)
}
