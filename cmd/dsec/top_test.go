package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// topServer is /v1 and the dashboard over a node (the agent over the mock
// driver), with sandbox use that grows as the test says: "busy" burns a core,
// "fat" holds memory.
func topServer(t *testing.T) (*client.Client, [3]string) {
	t.Helper()
	node := agenttest.NewNode(t)
	var ids [3]string
	for i := range ids {
		sb, err := node.Create(context.Background(), api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = sb.ID
	}
	var mu sync.Mutex
	start := time.Now()
	usage := func(_ context.Context, _ []string) ([]api.SandboxUsage, error) {
		mu.Lock()
		defer mu.Unlock()
		el := time.Since(start).Seconds()
		return []api.SandboxUsage{
			{ID: ids[0], State: "running", Backend: "container", CPUSeconds: 1, MemoryBytes: 10 << 20, MemoryLimitBytes: 512 << 20},
			{ID: ids[1], State: "running", Backend: "container", CPUSeconds: 1 + el, MemoryBytes: 20 << 20, MemoryLimitBytes: 512 << 20},
			{ID: ids[2], State: "running", Backend: "container", CPUSeconds: 2, MemoryBytes: 300 << 20, MemoryLimitBytes: 512 << 20},
		}, nil
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: "t", Service: node, Usage: dashboard.UsageFunc(usage)}))
	mux.Handle("/", v1.New(node, v1.Options{Token: "t"}).Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client.New(srv.URL, "t"), ids
}

// TestTopOnceWhenPiped: with stdout a pipe, dsec top prints one plain
// snapshot (no escape sequences) and exits: the node, the counts, and the
// busiest sandboxes in order.
func TestTopOnceWhenPiped(t *testing.T) {
	cl, ids := topServer(t)
	for _, c := range []struct {
		sort  string
		order []string
	}{
		{"cpu", []string{ids[1], ids[2], ids[0]}},    // ids[1] burns CPU; the others by memory
		{"memory", []string{ids[2], ids[1], ids[0]}}, // by memory alone
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(r); done <- b }()
		o := topOptions{interval: 200 * time.Millisecond, limit: 10, sort: c.sort}
		if err := runTop(context.Background(), cl, o, os.Stdin, w); err != nil {
			t.Fatal(err)
		}
		w.Close()
		out := string(<-done)
		if strings.Contains(out, "\x1b") {
			t.Errorf("escape sequences in piped output: %q", out)
		}
		for _, want := range []string{"NODE", "mock-node", "sandboxes: 3 (running 3, paused 0, exited 0)", "SANDBOX", "(by " + c.sort + ")", "300.0 MiB"} {
			if !strings.Contains(out, want) {
				t.Errorf("sort %s: output lacks %q:\n%s", c.sort, want, out)
			}
		}
		var rows []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "sb-") {
				rows = append(rows, f[0])
			}
		}
		if strings.Join(rows, " ") != strings.Join(c.order, " ") {
			t.Errorf("sort %s: rows %v, want %v\n%s", c.sort, rows, c.order, out)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && f[0] == ids[1] {
				if p, err := strconv.ParseFloat(f[3], 64); err != nil || p < 50 {
					t.Errorf("the busy sandbox's CPU%% is %q, want about 100:\n%s", f[3], out)
				}
			}
		}
	}
	if err := runTop(context.Background(), cl, topOptions{interval: time.Millisecond, limit: 1, sort: "cpu"}, os.Stdin, os.Stdout); err == nil {
		t.Error("a 1ms interval was accepted")
	}
}

// TestTopLiveQuits: on a terminal dsec top draws on the alternate screen and
// q ends it, restoring the screen.
func TestTopLiveQuits(t *testing.T) {
	cl, ids := topServer(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	_ = pty.Setsize(ptmx, &pty.Winsize{Cols: 160, Rows: 30})
	var screen bytes.Buffer
	var mu sync.Mutex
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	ended := make(chan error)
	go func() {
		ended <- runTop(context.Background(), cl, topOptions{interval: 100 * time.Millisecond, limit: 5, sort: "cpu"}, tty, tty)
	}()
	drawn := testwait.Until(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(screen.String(), ids[2]) && strings.Contains(screen.String(), "[q] quit")
	})
	if !drawn {
		mu.Lock()
		s := screen.String()
		mu.Unlock()
		t.Fatalf("not drawn: %q", s)
	}
	if _, err := ptmx.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not end dsec top")
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if s := screen.String(); !strings.Contains(s, "\x1b[?1049h") || !strings.HasSuffix(s, "\x1b[?25h\x1b[?1049l") {
		t.Errorf("alternate screen not entered and left: ...%q", s[max(0, len(s)-80):])
	}
}

// TestTopShowsPulls: the image pulls in flight get rows of their own, with
// their node (none: no section).
func TestTopShowsPulls(t *testing.T) {
	var none bytes.Buffer
	renderTop(&none, api.Top{SortBy: "cpu"}, topPulls{})
	if strings.Contains(none.String(), "PULL") {
		t.Fatalf("a pull section with no pulls:\n%s", none.String())
	}
	var out bytes.Buffer
	renderTop(&out, api.Top{SortBy: "cpu"}, topPulls{pulls: []api.PullProgress{{Ref: "docker.io/library/python:3.12", Node: "n2", Phase: api.PullFetching,
		FetchedBytes: 3 << 20, TotalBytes: 12 << 20, Layers: []api.LayerProgress{{Phase: api.PullDone}, {Phase: api.PullFetching}}}}})
	for _, want := range []string{"image pulls: 1", "PULL", "docker.io/library/python:3.12  n2    fetching  1/2", "3.0 MiB / 12.0 MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestTopShowsSandboxesPulling: sandboxes in state pulling (a create with
// wait false) are counted in the summary and listed with their pull's bytes
// fetched of total; none: no section.
func TestTopShowsSandboxesPulling(t *testing.T) {
	var none bytes.Buffer
	renderTop(&none, api.Top{SortBy: "cpu"}, topPulls{})
	if strings.Contains(none.String(), "pulling") {
		t.Fatalf("a pulling section with no sandbox pulling:\n%s", none.String())
	}
	top := api.Top{SortBy: "cpu"}
	top.Sandboxes.Total = 3
	top.Sandboxes.ByState = map[string]int{"running": 1, api.StatePulling: 2}
	var out bytes.Buffer
	renderTop(&out, top, topPulls{waiting: []api.Sandbox{
		{ID: "sb-a", Image: "python:3.12", State: api.StatePulling, Pull: &api.PullProgress{Phase: api.PullFetching, FetchedBytes: 5 << 20, TotalBytes: 20 << 20,
			Layers: []api.LayerProgress{{Phase: api.PullDone}, {Phase: api.PullFetching}, {Phase: api.PullWaiting}}}},
		{ID: "sb-b", Image: "ghcr.io/o/t:1", State: api.StatePulling},
	}})
	for _, want := range []string{"sandboxes: 3 (running 1, paused 0, exited 0, pulling 2)", "sandboxes pulling their image: 2",
		"sb-a     python:3.12    fetching   1/3", "5.0 MiB / 20.0 MiB", "sb-b     ghcr.io/o/t:1  resolving  -"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
