package escapeprobe

import (
	"strings"
	"testing"
)

func TestRootDisk(t *testing.T) {
	for _, c := range []struct {
		name, in string
		maj, min uint32
		src      string
		err      bool
	}{
		{"root on a disk", "22 27 0:21 / /proc rw - proc proc rw\n27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n", 254, 0, "/dev/vda", false},
		{"optional fields", "27 1 8:2 / / rw shared:1 master:2 - xfs /dev/sda2 rw\n", 8, 2, "/dev/sda2", false},
		{"overlay root, a disk elsewhere", "1 0 0:50 / / rw - overlay overlay rw\n2 1 259:3 / /data rw - ext4 /dev/nvme0n1p3 rw\n3 1 259:1 / /boot rw - ext4 /dev/nvme0n1p1 rw\n", 259, 1, "/dev/nvme0n1p1", false},
		{"no disk", "1 0 0:50 / / rw - overlay overlay rw\n", 0, 0, "", true},
		{"garbage", "x\n\n- - -\n1 2 3\n", 0, 0, "", true},
	} {
		maj, min, src, err := rootDisk(strings.NewReader(c.in))
		if (err != nil) != c.err || maj != c.maj || min != c.min || src != c.src {
			t.Errorf("%s: %d:%d %q %v", c.name, maj, min, src, err)
		}
	}
}

func FuzzRootDisk(f *testing.F) {
	f.Add("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n")
	f.Add("1 0 0:50 / / rw - overlay overlay rw\n2 1 259:3 / /data rw - ext4 /dev/nvme0n1p3 rw\n")
	f.Fuzz(func(t *testing.T, s string) {
		maj, _, _, err := rootDisk(strings.NewReader(s))
		if err == nil && maj == 0 {
			t.Fatalf("picked an anonymous device from %q", s)
		}
	})
}

func TestProbesNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Probes() {
		if p.Name == "" || seen[p.Name] || len(p.Defences) == 0 || p.try == nil {
			t.Errorf("probe %+v: needs a unique name, defences and an attempt", p.Name)
		}
		seen[p.Name] = true
	}
}
