package container

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cgroups"
)

func TestParseDevice(t *testing.T) {
	d, err := ParseDevice("fuse:c:10:229")
	if err != nil || d.Name != "fuse" || d.Rule != (cgroups.DeviceRule{Type: 'c', Major: 10, Minor: 229, Access: "rwm"}) {
		t.Fatalf("ParseDevice = %+v, %v", d, err)
	}
	if d, err := ParseDevice("kvm:c:10:232:rw"); err != nil || d.Rule.Access != "rw" {
		t.Fatalf("with access: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "fuse", "fuse:c:10", "../x:c:1:1", "x:a:1:1", "x:c:*:1", "x:c:1:1:rwx", "x:c:1:1:rw:extra", "x y:c:1:1"} {
		if d, err := ParseDevice(bad); err == nil {
			t.Errorf("ParseDevice(%q) = %+v, want an error", bad, d)
		}
	}
}

// TestOperatorDevice: a device the operator adds (here /dev/fuse, which
// opening alone does nothing with) gets a node in /dev that opens; without
// it the same node, made with CAP_MKNOD given back, is refused by the
// device cgroup.
func TestOperatorDevice(t *testing.T) {
	w := newWeakDriver(t)
	dev, err := ParseDevice("fuse:c:10:229")
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Devices = []Device{dev}
	if out, errOut, ex := run(t, w.start(t, weakening{}), "sh", "-c", "exec 3<>/dev/fuse && echo opened"); ex.Code != 0 || out != "opened\n" {
		t.Fatalf("operator device: %+v %q %q", ex, out, errOut)
	}
	w.cfg.Devices = nil
	out, errOut, ex := run(t, w.start(t, weakening{mknod: true}), "sh", "-c", "mknod /dev/fuse c 10 229 && exec 3<>/dev/fuse && echo opened")
	if ex.Code == 0 || !strings.Contains(errOut, "not permitted") {
		t.Fatalf("/dev/fuse without the operator's device: %+v %q %q", ex, out, errOut)
	}
}
