package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func demoCmd() *cobra.Command {
	var n int
	c := &cobra.Command{
		Use:   "demo",
		Short: "Start a private node and walk through what dsec does (needs root and the debian image: `make demo`)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), n)
		},
	}
	c.Flags().IntVar(&n, "n", 100, "sandboxes in the burst step")
	return c
}

func runDemo(ctx context.Context, burst int) error {
	if err := os.MkdirAll("/var/lib/dsec", 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("/var/lib/dsec", "demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log, _ := newLogger("warn")
	// The walkthrough uses container sandboxes only: the VM backends stay
	// out (`make demo` installs no guest kernel or desktop image for them).
	d, err := daemon.New(ctx, daemon.Config{DataDir: dir, Logger: log, NoMicroVM: true, NoFullVM: true})
	if err != nil {
		return err
	}
	defer d.Shutdown(context.Background(), true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = d.Serve(l) }()
	cl := client.New("http://"+l.Addr().String(), d.Token)
	step := func(s string) { fmt.Printf("\n== %s\n", s) }

	step("create a sandbox (Debian bookworm image, 1 CPU, 512 MiB, 1 GiB writable layer)")
	t0 := time.Now()
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		return err
	}
	fmt.Printf("%s created in %.1f ms\n", sb.ID, float64(time.Since(t0).Microseconds())/1000)

	run := func(shell string) error {
		r, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: shell})
		if err != nil {
			return err
		}
		fmt.Printf("$ %s\n%s%s[exit %d, %.1f ms]\n", shell, r.Stdout, r.Stderr, r.ExitCode, r.DurationMs)
		return nil
	}
	step("run commands through the session API")
	for _, s := range []string{
		`python3 -c 'import json, subprocess; print(1)'`,
		`git --version`,
		`head -1 /etc/os-release; hostname; id`,
		`ps -o pid,comm 2>/dev/null || ls /proc | grep -E '^[0-9]+$'`,
	} {
		if err := run(s); err != nil {
			return err
		}
	}
	step("isolation: privileged calls are refused, no network but loopback")
	for _, s := range []string{`mount -t tmpfs x /mnt; echo "mount exit $?"`, `cat /proc/net/dev | tail -n +3 | cut -d: -f1`} {
		if err := run(s); err != nil {
			return err
		}
	}
	step("files: write through the API, read back inside")
	if _, err := cl.WriteFile(ctx, sb.ID, "/root/hello.txt", 0o644, strings.NewReader("hello from the host\n")); err != nil {
		return err
	}
	if err := run("cat /root/hello.txt"); err != nil {
		return err
	}
	step("a background HTTP server inside, reached through the API's proxy")
	p, err := cl.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-m", "http.server", "8000"}, Cwd: "/root"})
	if err != nil {
		return err
	}
	var body []byte
	for i := 0; i < 50; i++ {
		resp, err := cl.HTTP(ctx, sb.ID, 8000, "GET", "/hello.txt", nil, nil)
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("GET :8000/hello.txt via proxy → %q (process %s, pid %d)\n", bytes.TrimSpace(body), p.ID, p.PID)

	if err := demoLayered(ctx, cl, d, dir); err != nil {
		return err
	}

	step(fmt.Sprintf("burst: create %d sandboxes in parallel, run a command in each, delete them", burst))
	t0 = time.Now()
	ids := make([]string, burst)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range ids {
		g.Go(func() error {
			s, err := cl.Create(ctx, api.CreateSandboxRequest{MemoryBytes: 64 << 20})
			if err == nil {
				var r api.ExecResult
				r, err = cl.Exec(ctx, s.ID, api.ExecRequest{Cmd: []string{"echo", "ok"}})
				if err == nil && strings.TrimSpace(r.Stdout) != "ok" {
					err = fmt.Errorf("unexpected output %q", r.Stdout)
				}
				ids[i] = s.ID
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	el := time.Since(t0)
	fmt.Printf("%d sandboxes created and exec'd in %.2f s (%.0f/s)\n", burst, el.Seconds(), float64(burst)/el.Seconds())
	t0 = time.Now()
	for _, id := range ids {
		if err := cl.Delete(ctx, id); err != nil {
			return err
		}
	}
	fmt.Printf("deleted in %.2f s\n", time.Since(t0).Seconds())
	if err := cl.Delete(ctx, sb.ID); err != nil {
		return err
	}
	fmt.Println("\ndemo done: every sandbox deleted. Next: `make test`, `dsec server`, `dsec bench create --compare crun`.")
	return nil
}

// demoLayered builds the Debian image into an EROFS base layer, composes an
// environment on it, and runs a Python task in a sandbox on that environment on a
// node that has never read it, showing how little of the layer was fetched.
func demoLayered(ctx context.Context, cl *client.Client, d *daemon.Daemon, dataDir string) error {
	fmt.Printf("\n== layered environment: Debian as an EROFS base layer in a blob store, read on demand\n")
	root, err := d.Manager.ImageLower("")
	if err != nil || len(root.Lower()) != 1 {
		fmt.Println("skipped: the default image is not a single directory")
		return nil
	}
	bs, err := OpenBlobStore("", dataDir)
	if err != nil {
		return err
	}
	dirs := paths.New(dataDir)
	es, err := envstore.Open(dirs.EnvStore(), bs)
	if err != nil {
		return err
	}
	es.Spec = dirs.BlobSpec("")
	l, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: root.Lower()[0]}, bs, layer.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("dsec image build --from dir:%s --name debian-base → %.1f MB in %.1f s\n", root.Lower()[0], float64(l.Size)/1e6, l.BuildTime.Seconds())
	if err := es.PutLayer(ctx, envstore.Named("debian-base", l.Source, l.Layer)); err != nil {
		return err
	}
	if _, err := es.Compose(ctx, "demo-env", "debian-base", nil, ""); err != nil {
		return err
	}
	t0 := time.Now()
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: "demo-env"})
	if err != nil {
		return err
	}
	defer cl.Delete(context.Background(), sb.ID)
	r, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: "python3 -c 'import json, subprocess; print(1)' && git --version"})
	if err != nil {
		return err
	}
	fmt.Printf("create --image demo-env + python3 + git: %q in %.2f s\n", strings.TrimSpace(r.Stdout), time.Since(t0).Seconds())
	img, err := cl.Image(ctx, "demo-env")
	if err != nil {
		return err
	}
	fmt.Printf("fetched %.1f MB of %.1f MB (%.1f%%) of the layer from the blob store\n",
		float64(img.BytesFetched)/1e6, float64(img.Size)/1e6, 100*float64(img.BytesFetched)/float64(max(img.Size, 1)))
	return nil
}
