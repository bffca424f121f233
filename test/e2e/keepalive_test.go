package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// idleCutProxy forwards TCP connections to target and cuts any connection on
// which nothing has moved either way for idle, as NATs and HTTP proxies do. It
// returns its address and how many connections it cut.
func idleCutProxy(t *testing.T, target string, idle time.Duration) (string, func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cuts := 0
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				u, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				activity := make(chan struct{}, 1)
				pipe := func(dst, src net.Conn) {
					buf := make([]byte, 32<<10)
					for {
						n, err := src.Read(buf)
						if n > 0 {
							select {
							case activity <- struct{}{}:
							default:
							}
							if _, werr := dst.Write(buf[:n]); werr != nil {
								break
							}
						}
						if err != nil {
							break
						}
					}
					c.Close()
					u.Close()
				}
				go pipe(u, c)
				go pipe(c, u)
				timer := time.NewTimer(idle)
				defer timer.Stop()
				for {
					select {
					case <-activity:
						timer.Reset(idle)
					case <-timer.C:
						mu.Lock()
						cuts++
						mu.Unlock()
						c.Close()
						u.Close()
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return cuts }
}

// TestLongCallsKeepAlive: a blocking exec, a streaming exec and a process wait of commands that
// run 4x longer than a proxy in front of the server lets a connection idle
// get their exit codes through that proxy, because the server keeps the answer
// busy (--keepalive); the command ran once. With keep-alive off the same exec
// is cut by the proxy. DSEC_KEEPALIVE_LONG=1 makes it the 10-minute command
// through a 60 s proxy.
func TestLongCallsKeepAlive(t *testing.T) {
	idle, run, every := 2*time.Second, 8*time.Second, "500ms"
	if envOr("DSEC_KEEPALIVE_LONG", "") == "1" {
		idle, run, every = 60*time.Second, 10*time.Minute, "15s"
	}
	n := startNode(t, "--keepalive", every)
	ctx, cancel := context.WithTimeout(context.Background(), run+5*time.Minute)
	defer cancel()
	sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	addr, cuts := idleCutProxy(t, n.addr, idle)
	pc := client.New("http://"+addr, n.token, client.WithRetry(0))
	secs := strconv.Itoa(int(run / time.Second))

	res, err := pc.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo ran >> /runs; sleep " + secs + "; exit 7"})
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("blocking exec of %v through a proxy cutting after %v idle: %+v %v", run, idle, res, err)
	}
	p, err := pc.StartProcess(ctx, sb.ID, api.ExecRequest{Shell: "echo ran >> /runs; sleep " + secs + "; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pc.WaitProcess(ctx, sb.ID, p.ID, 0)
	if err != nil || got.Running || got.Result == nil || got.Result.ExitCode != 3 {
		t.Fatalf("process wait through the proxy: %+v %v", got, err)
	}
	// The streaming form (what `dsec exec` uses) sends keepalive events.
	sres, err := pc.ExecStream(ctx, sb.ID, api.ExecRequest{Shell: "echo ran >> /runs; sleep " + secs + "; exit 5"}, nil, io.Discard, io.Discard)
	if err != nil || sres.ExitCode != 5 {
		t.Fatalf("streaming exec through the proxy: %+v %v", sres, err)
	}
	if r, err := n.cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: "wc -l < /runs"}); err != nil || strings.TrimSpace(r.Stdout) != "3" {
		t.Errorf("commands ran %q times, want 3 (one each): %v", r.Stdout, err)
	}
	if c := cuts(); c != 0 {
		t.Errorf("the proxy cut %d connections", c)
	}

	// A call that fails after its answer started is still an error.
	go func() {
		time.Sleep(3 * time.Second)
		_ = n.cl.Delete(context.Background(), sb.ID)
	}()
	r, err := pc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status < 400 {
		t.Errorf("exec in a sandbox deleted after the answer started: %+v %v (%T), want an API error with its status", r, err, err)
	} else {
		t.Logf("late error: %v (status %d)", ae, ae.Status)
	}

	if testing.Short() || run > time.Minute {
		return
	}
	// The weakened case: without keep-alive the proxy cuts the exec.
	n2 := startNode(t, "--keepalive", "-1s")
	sb2, err := n2.cl.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	addr2, cuts2 := idleCutProxy(t, n2.addr, idle)
	_, err = client.New("http://"+addr2, n2.token, client.WithRetry(0)).Exec(ctx, sb2.ID, api.ExecRequest{Shell: "sleep " + secs})
	if err == nil || cuts2() == 0 {
		t.Errorf("without keep-alive the proxy did not cut the exec: %v, %d cuts", err, cuts2())
	}
	_, err = client.New("http://"+addr2, n2.token, client.WithRetry(0)).ExecStream(ctx, sb2.ID,
		api.ExecRequest{Shell: "sleep " + secs}, nil, io.Discard, io.Discard)
	if err == nil || cuts2() < 2 {
		t.Errorf("without keep-alive the proxy did not cut the streaming exec: %v, %d cuts", err, cuts2())
	}
}
