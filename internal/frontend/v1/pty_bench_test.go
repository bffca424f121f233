package v1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// benchAPIPTY measures a keystroke's round trip through the whole /v1 stack: an
// NDJSON stdin line into POST .../exec/stream (tty: true), the agent, the driver,
// cat on a raw terminal in the sandbox, and back out as a stdout event.
func benchAPIPTY(b *testing.B, drv driver.Driver, store *image.Store, create api.CreateSandboxRequest) {
	ctx := context.Background()
	reg, err := driver.NewRegistry(drv)
	if err != nil {
		b.Fatal(err)
	}
	m, err := agent.New(ctx, agent.Config{DataDir: b.TempDir(), Drivers: reg, Images: store, Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	defer m.DeleteAll(ctx)
	sb, err := m.Create(ctx, create)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(v1.New(m, v1.Options{Token: "t"}).Handler())
	defer ts.Close()

	bodyR, bodyW := io.Pipe()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sandboxes/"+sb.ID+"/exec/stream", bodyR)
	req.Header.Set("Authorization", "Bearer t")
	enc := json.NewEncoder(bodyW)
	go enc.Encode(api.ExecRequest{Shell: "stty raw -echo; echo ready; exec cat", TTY: true})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("exec/stream: %s %s", resp.Status, msg)
	}
	events := bufio.NewScanner(resp.Body)
	next := func() api.StreamEvent {
		if !events.Scan() {
			b.Fatalf("stream ended: %v", events.Err())
		}
		var ev api.StreamEvent
		if err := json.Unmarshal(events.Bytes(), &ev); err != nil {
			b.Fatal(err)
		}
		return ev
	}
	var seen []byte
	deadline := time.Now().Add(20 * time.Second)
	for !bytes.Contains(seen, []byte("ready")) {
		if time.Now().After(deadline) {
			b.Fatalf("no prompt: %q", seen)
		}
		if ev := next(); ev.Type == "stdout" {
			seen = append(seen, ev.Data...)
		}
	}
	key, _ := json.Marshal(api.StreamInput{Stdin: []byte("k")})
	key = append(key, '\n')
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := bodyW.Write(key); err != nil {
			b.Fatal(err)
		}
		for {
			ev := next()
			if ev.Type == "stdout" && bytes.HasSuffix(ev.Data, []byte("k")) {
				break
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	sig, _ := json.Marshal(api.StreamInput{Signal: "SIGKILL"})
	_, _ = bodyW.Write(append(sig, '\n'))
	bodyW.Close()
	for events.Scan() {
	}
}

// BenchmarkPTYAPIMock runs on the mock driver (any user, no images).
func BenchmarkPTYAPIMock(b *testing.B) {
	imgs := b.TempDir()
	if err := os.MkdirAll(imgs+"/tiny/rootfs/etc", 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(imgs+"/tiny/image.json", []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	benchAPIPTY(b, d, &image.Store{Dir: imgs, Default: "tiny"}, api.CreateSandboxRequest{})
}

// BenchmarkPTYAPIContainer runs on the container driver (root, busybox image).
func BenchmarkPTYAPIContainer(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	store := &image.Store{Dir: "/var/lib/dsec/images", Default: "busybox"}
	if _, err := store.Resolve(""); err != nil {
		b.Skipf("busybox image: %v", err)
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-pb-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(state)
	run, err := os.MkdirTemp("/run", "dsec-pb-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(run)
	d, err := container.New(container.Config{StateDir: state, RunDir: run, CgroupParent: "dsec-bench-" + filepath.Base(state)})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	benchAPIPTY(b, d, store, api.CreateSandboxRequest{})
}
