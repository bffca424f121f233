// Package e2e tests dsec end to end as a user would: it builds the dsec binary, runs
// `dsec server` as a separate process on a scratch data dir, and drives it through
// the Go client and the CLI. Needs root and the default image (`make setup`).
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/racecheck"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

var (
	binPath   string // the built dsec binary
	skipAll   string // reason to skip every test
	imagesDir = envOr("DSEC_IMAGES_DIR", daemon.DefaultImagesDir)
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	switch {
	case os.Geteuid() != 0:
		skipAll = "needs root"
	default:
		if _, err := os.Stat(filepath.Join(imagesDir, "debian", "image.json")); err != nil {
			skipAll = "default image missing (run `make setup`)"
		}
	}
	code := 0
	if skipAll == "" {
		dir, err := os.MkdirTemp("", "dsec-e2e-bin")
		if err != nil {
			panic(err)
		}
		// dsec and dsecd side by side: `dsec server` runs the dsecd next to it.
		binPath = filepath.Join(dir, "dsec")
		// DSEC_E2E_RACE=1 (make test sets it) runs the real server under the race
		// detector.
		args := []string{"build", "-o", dir + "/"}
		if os.Getenv("DSEC_E2E_RACE") == "1" {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/dsec-dev/dsec/cmd/dsec", "github.com/dsec-dev/dsec/cmd/dsecd")...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build dsec: %v\n%s", err, out)
			os.Exit(1)
		}
		code = m.Run()
		os.RemoveAll(dir)
	} else {
		code = m.Run()
	}
	os.Exit(code)
}

// node is one `dsec server` process on its own data dir.
type node struct {
	t       *testing.T
	dataDir string
	addr    string
	token   string
	cmd     *exec.Cmd
	args    []string // extra `dsec server` flags
	bin     string   // the dsec binary ("" = binPath, this tree's)
	logs    *bytes.Buffer
	cl      *client.Client
	// layerdRace is set once a race report in layerd's log failed the test.
	layerdRace bool
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startNode runs a server on a fresh data dir; the data dir and every sandbox
// are removed when the test ends.
func startNode(t *testing.T, args ...string) *node {
	t.Helper()
	if skipAll != "" {
		t.Skip(skipAll)
	}
	dir, err := os.MkdirTemp("/var/lib", "dsec-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dataDir: dir, addr: freePort(t), args: args}
	n.start()
	t.Cleanup(func() {
		n.stop(true)
		os.RemoveAll(dir)
	})
	return n
}

func (n *node) start() {
	t := n.t
	t.Helper()
	n.logs = &bytes.Buffer{}
	// DSEC_E2E_SERVER_ARGS adds flags to every server, e.g. --userns=on to
	// run the suite with user namespaces
	args := append(strings.Fields(os.Getenv("DSEC_E2E_SERVER_ARGS")), n.args...)
	bin := n.bin
	if bin == "" {
		bin = binPath
	}
	n.cmd = exec.Command(bin, append([]string{"server", "--listen", n.addr, "--data-dir", n.dataDir, "--log-level", "debug"}, args...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	// Under -race the first data race ends the server (and layerd, which
	// inherits the environment); stop fails the test on it.
	n.cmd.Env = racecheck.Env(os.Environ())
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := testwait.Until(20*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(n.dataDir, "token"))
		if err == nil && len(b) > 0 {
			n.token = strings.TrimSpace(string(b))
			n.cl = client.New("http://"+n.addr, n.token)
			if _, err := n.cl.Info(context.Background()); err == nil {
				return true
			}
		}
		return false
	})
	if !up {
		t.Fatalf("server did not come up:\n%s", n.logs)
	}
}

// stop ends the server: gracefully with --cleanup semantics when deleteAll (every
// sandbox removed through the API first), else with SIGKILL. The test fails if
// the server's output or layerd's log holds a race report, or the server exited
// non-zero or from a signal other than the one stop sent.
func (n *node) stop(deleteAll bool) {
	if n.cmd == nil {
		return
	}
	sent := syscall.SIGKILL
	if deleteAll {
		sent = syscall.SIGTERM
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if sbs, err := n.cl.List(ctx); err == nil {
			for _, s := range sbs {
				_ = n.cl.Delete(ctx, s.ID)
			}
		}
		cancel()
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	} else {
		_ = n.cmd.Process.Kill()
	}
	_ = n.cmd.Wait()
	if err := racecheck.Check("dsec server", n.logs.String(), n.cmd.ProcessState, sent); err != nil {
		n.t.Errorf("%v\n--- server log (tail):\n%s", err, tail(n.logs.String(), 3000))
	}
	n.cmd = nil
	if b, err := os.ReadFile(filepath.Join(paths.New(n.dataDir).Layers(), "layerd.log")); err == nil && !n.layerdRace {
		if r := racecheck.Report(string(b)); r != "" {
			n.layerdRace = true
			n.t.Errorf("dsec layerd: the race detector reported a data race:\n%s", r)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (n *node) create(t *testing.T, req api.CreateSandboxRequest) string {
	t.Helper()
	sb, err := n.cl.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = n.cl.Delete(context.Background(), sb.ID) })
	return sb.ID
}

func (n *node) sh(t *testing.T, id, shell string) api.ExecResult {
	t.Helper()
	r, err := n.cl.Exec(context.Background(), id, api.ExecRequest{Shell: shell, TimeoutMs: 60_000})
	if err != nil {
		t.Fatalf("exec %q: %v", shell, err)
	}
	return r
}

// cli runs the dsec CLI against this node.
func (n *node) cli(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+n.addr, "DSEC_TOKEN="+n.token)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run dsec %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}
