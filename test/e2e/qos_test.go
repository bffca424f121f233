package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func swapsList(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rawJSON sends a raw JSON request and returns the status and the error code.
func (n *node) rawJSON(t *testing.T, method, path, body string) (int, api.Code) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.addr+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error api.Error `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

func TestQoSServer(t *testing.T) {
	n := startNode(t, "--swap", "zram:256M", "--cpu-class-default", "be")
	ctx := context.Background()
	info, err := n.cl.Info(ctx)
	if err != nil || info.QoS == nil || info.QoS.Swap == "" || info.QoS.DefaultCPUClass != "be" {
		t.Fatalf("info: %+v %v", info.QoS, err)
	}
	dev := info.QoS.Swap
	if !strings.HasPrefix(dev, n.dataDir) || !strings.Contains(swapsList(t), dev) {
		t.Fatalf("swap device %q: not dsec's own or not in /proc/swaps:\n%s", dev, swapsList(t))
	}
	id := n.create(t, api.CreateSandboxRequest{})
	if sb, _ := n.cl.Get(ctx, id); sb.CPUClass != "be" {
		t.Errorf("default class %q", sb.CPUClass)
	}
	if _, errOut, code := n.cli(t, "", "cpu-class", id, "ls"); code != 0 {
		t.Fatalf("dsec cpu-class: %s", errOut)
	}
	if sb, _ := n.cl.Get(ctx, id); sb.CPUClass != "ls" {
		t.Errorf("class after dsec cpu-class: %q", sb.CPUClass)
	}
	// Bad input: 400 with a machine-readable code, nothing changed.
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/sandboxes/" + id + "/cpu-class", `{"cpu_class":"rt"}`},
		{"PUT", "/v1/sandboxes/" + id + "/cpu-class", `{"class":"be"}`},
		{"POST", "/v1/sandboxes/" + id + "/pause", `{"reclaim":"yes"}`},
		{"POST", "/v1/sandboxes", `{"cpu_class":"fast"}`},
	} {
		if st, code := n.rawJSON(t, c.method, c.path, c.body); st != 400 || code != api.CodeInvalidArgument {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, st, code)
		}
	}
	if sb, _ := n.cl.Get(ctx, id); sb.CPUClass != "ls" || sb.State != api.StateRunning {
		t.Errorf("after bad input: %+v", sb)
	}
	n.sh(t, id, "head -c 20000000 /dev/zero | tr '\\0' x > /dev/shm/blob && sha256sum /dev/shm/blob > /tmp/sum")
	out, errOut, code := n.cli(t, "", "pause", "--reclaim", id)
	if code != 0 || !strings.Contains(out, "to swap") || strings.Contains(out, "no swap") {
		t.Fatalf("dsec pause --reclaim: %q %q", out, errOut)
	}
	t.Logf("dsec pause --reclaim: %s", strings.TrimSpace(out))
	if _, errOut, code := n.cli(t, "", "resume", id); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}
	if r := n.sh(t, id, "sha256sum -c /tmp/sum"); r.ExitCode != 0 {
		t.Errorf("data after reclaim and resume: %+v", r)
	}
	// A crashed server leaves its device; the next start (even without --swap)
	// removes it. A clean shutdown removes it too.
	n.stop(false)
	if !strings.Contains(swapsList(t), dev) {
		t.Fatalf("swap gone after a crash?")
	}
	n.args = nil
	n.start()
	if strings.Contains(swapsList(t), dev) {
		t.Errorf("stale device %s not removed at restart", dev)
	}
	if _, err := os.Stat(filepath.Join(n.dataDir, "swap.json")); !os.IsNotExist(err) {
		t.Errorf("ownership record left: %v", err)
	}
	n.args = []string{"--swap", "zram:64M"}
	n.stop(true)
	n.start()
	dev2 := ""
	if info, err := n.cl.Info(ctx); err == nil && info.QoS != nil {
		dev2 = info.QoS.Swap
	}
	n.stop(true)
	if dev2 == "" || strings.Contains(swapsList(t), dev2) {
		t.Errorf("device %q after a clean shutdown:\n%s", dev2, swapsList(t))
	}
	n.start() // startNode's cleanup stops it again
}
