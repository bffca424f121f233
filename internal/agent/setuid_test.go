package agent_test

import (
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestAllowSetuid: a sandbox created with allow_setuid reports it, user
// 1000's `sudo id -u` prints 0 there and in its fork children, and a
// sandbox created without it refuses sudo (no_new_privs).
func TestAllowSetuid(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sudo := api.ExecRequest{Cmd: []string{"sudo", "-n", "id", "-u"}, User: "1000"}
	off := create(t, m, api.CreateSandboxRequest{})
	if off.AllowSetuid {
		t.Errorf("default sandbox reports allow_setuid")
	}
	if res := execOK(t, m, off.ID, sudo); res.ExitCode == 0 {
		t.Errorf("sudo worked without allow_setuid: %+v", res)
	}
	on := create(t, m, api.CreateSandboxRequest{AllowSetuid: true})
	if !on.AllowSetuid {
		t.Errorf("sandbox created with allow_setuid does not report it: %+v", on)
	}
	ids := []string{on.ID}
	res, err := m.Fork(ctxT(t), on.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	for _, c := range res.Children {
		if !c.AllowSetuid {
			t.Errorf("fork child %s lost allow_setuid", c.ID)
		}
		ids = append(ids, c.ID)
	}
	for _, id := range ids {
		if res := execOK(t, m, id, sudo); res.ExitCode != 0 || res.Stdout != "0\n" {
			t.Errorf("%s: sudo id -u as 1000: %+v, want 0", id, res)
		}
	}
}
