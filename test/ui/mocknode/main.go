// Command mocknode serves dsec's /v1 API and the dashboard over a node agent
// with the mock driver (no root, no images) holding many sandboxes, for the
// dashboard's first-paint measurement (test/ui: 10,000 sandboxes). The agent,
// the /v1 server and the dashboard are the real ones; only the driver is the
// mock, whose sandboxes have a 320x200 screen. It prints "ready URL" once every sandbox exists and serves until killed.
//
//	go run ./test/ui/mocknode -n 10000 -token T -listen 127.0.0.1:0
package main

import (
	"context"
	"flag"
	"fmt"
	"image"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	image1 "github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The size of the mock sandboxes' screens (test/ui checks the image shown).
const ScreenW, ScreenH = 320, 200

func main() {
	n := flag.Int("n", 10000, "sandboxes to create")
	token := flag.String("token", "", "API token")
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	dir := flag.String("dir", "", "state directory (default: a temp dir, removed on exit)")
	flag.Parse()
	if err := run(*n, *token, *listen, *dir); err != nil {
		log.Fatal(err)
	}
}

func run(n int, token, listen, dir string) error {
	ctx := context.Background()
	if dir == "" {
		d, err := os.MkdirTemp("", "dsec-mocknode-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	imgs := filepath.Join(dir, "images")
	if err := os.MkdirAll(filepath.Join(imgs, "tiny", "rootfs", "etc"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(imgs, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		return err
	}
	// Every mock sandbox has a display (the dashboard's screen view is tested here).
	drv, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: filepath.Join(dir, "mock"), Screen: image.Pt(ScreenW, ScreenH)})
	if err != nil {
		return err
	}
	reg, err := driver.NewRegistry(drv)
	if err != nil {
		return err
	}
	m, err := agent.New(ctx, agent.Config{DataDir: filepath.Join(dir, "agent"), Drivers: reg,
		Images: &image1.Store{Dir: imgs, Default: "tiny"}, Node: "mock", MaxSandboxes: n + 10})
	if err != nil {
		return err
	}
	defer m.Close()
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				_, err := m.Create(ctx, api.CreateSandboxRequest{Backend: drv.Name(),
					Labels: map[string]string{"batch": fmt.Sprint(i % 100), "kind": []string{"swe", "eval"}[i%2]}})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("create: %w", err)
	default:
	}
	fmt.Fprintf(os.Stderr, "mocknode: %d sandboxes in %.1fs\n", n, time.Since(t0).Seconds())

	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: token, Service: m}))
	mux.Handle("/", v1.New(m, v1.Options{Token: token}).Handler())
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Printf("ready http://%s\n", l.Addr())
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(l)
}
