package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestDoctorSaysWhatIsDegraded(t *testing.T) {
	var b bytes.Buffer
	writeDoctor(&b, "6.1.0-57-amd64", []api.HostFeature{
		{Name: "cgroup-v2", Available: true, Detail: "controllers: cpu memory pids"},
		{Name: "fuse-resend", Detail: "kernel 6.1.0-57-amd64: FUSE_NOTIFY_RESEND needs Linux 6.9", Degraded: "reads see EIO"},
		{Name: "cgroup-v1", Required: true, Detail: "none", Degraded: "nothing starts"},
	})
	out := b.String()
	for _, want := range []string{"kernel 6.1.0-57-amd64", "cgroup-v2", "ok", "fuse-resend", "missing",
		"without it: reads see EIO", "MISSING (required)", "without it: nothing starts"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "without it:") != 2 {
		t.Errorf("an available feature must not print what is degraded:\n%s", out)
	}
}
