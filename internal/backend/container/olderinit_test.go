package container

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestOlderInitRefusal: only an init's EBUSY refusal of EXEC makes an exec
// redial (and stop reusing connections); other refusals are the caller's.
func TestOlderInitRefusal(t *testing.T) {
	busy := errdefs.Wrap(api.CodeConflict, &initproto.RemoteError{Op: "EXEC", Errno: unix.EBUSY, Msg: "connection already has a process"}, "initproto")
	if !olderInit(busy) {
		t.Fatalf("%v not taken for an older init", busy)
	}
	for _, err := range []error{
		nil,
		errors.New("initproto: send EXEC: broken pipe"),
		errdefs.Wrap(api.CodeConflict, &initproto.RemoteError{Op: "EXEC", Errno: unix.EEXIST}, "initproto"),
		&initproto.RemoteError{Op: "WAIT", Errno: unix.EBUSY},
		&initproto.ExecError{Errno: unix.EBUSY, Msg: "exec: busy"},
	} {
		if olderInit(err) {
			t.Errorf("%v taken for an older init", err)
		}
	}
}
