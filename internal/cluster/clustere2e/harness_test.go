package clustere2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/racecheck"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/client"
)

// ttl is the agents' lease TTL in this test (the default is 10 s; a shorter one
// keeps the test short and checks the same mechanism).
const ttl = 4 * time.Second

// proc is one dsec process of the cluster.
type proc struct {
	name string
	args []string
	ns   string // network namespace to run in ("" = the host's)
	cmd  *exec.Cmd
	logs *syncBuffer
	run  *started
}

// started is one start of a dsec process: teardown fails the test if its output
// holds a race report, or it ended other than cleanly or by the signal the test
// sent it.
type started struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	sent syscall.Signal // the signal that ended it on purpose (0: none sent)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// agent is one node: its namespace, links and addresses.
type agent struct {
	proc
	node    string
	ns      string
	hostIf  string // veth end in the host namespace
	addr    string // the agent's RPC address, in its namespace
	dataDir string
}

// env is the whole test cluster.
type env struct {
	t       *testing.T
	bin     string
	dir     string
	secret  string
	hub     string // address of the etcd members, on the host's loopback
	etcds   []*proc
	etcdEPs string
	agents  []*agent
	apis    []*proc
	apiAddr []string
	// apiArgs are further flags of every API server startAPI starts.
	apiArgs []string
	// agentArgs are further flags of every agent startAgent starts.
	agentArgs []string
	token     string
	// maxSandboxes is each agent's --max-sandboxes (setupCapacity).
	maxSandboxes int
	mu           sync.Mutex
	cleanup      []func()
	runs         []*started
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// freePort returns a port free on ip.
func freePort(t *testing.T, ip string) string {
	t.Helper()
	// The kernel may hand a port it just gave (and we closed) out again: an
	// etcd cluster was once configured with one URL twice. Each address is
	// handed out once per test process.
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
	t.Fatal("no free port not handed out before")
	return ""
}

// handedOut is every address freePort returned in this test process.
var handedOut sync.Map

func (e *env) defer_(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanup = append(e.cleanup, f)
}

// start runs p; it is killed when the test ends.
func (e *env) start(p *proc) {
	e.t.Helper()
	args := append([]string{e.bin}, p.args...)
	if p.ns != "" {
		args = append([]string{"nsenter", "--net=/run/netns/" + p.ns, "--"}, args...)
	}
	p.logs = &syncBuffer{}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	// Under -race the first data race ends the process (and its layerd);
	// teardown fails the test on it.
	p.cmd.Env = racecheck.Env(os.Environ())
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", p.name, err)
	}
	r := &started{name: p.name, cmd: p.cmd, logs: p.logs}
	p.run = r
	e.mu.Lock()
	e.runs = append(e.runs, r)
	e.mu.Unlock()
	e.defer_(func() {
		if r.cmd.ProcessState == nil {
			r.sent = syscall.SIGKILL
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
}

// checkRuns fails the test for each process whose output holds a race report or
// that ended other than cleanly or by the test's own signal, and for a race
// report in an agent's layerd log.
func (e *env) checkRuns() {
	e.mu.Lock()
	runs := e.runs
	e.mu.Unlock()
	layerdLogs := map[string]string{} // run name → its layerd's log
	for _, a := range e.agents {
		layerdLogs["agent "+a.node] = filepath.Join(paths.New(a.dataDir).Layers(), "layerd.log")
	}
	for _, r := range runs {
		if err := racecheck.Check(r.name, r.logs.String(), r.cmd.ProcessState, r.sent); err != nil {
			more := ""
			if b, rerr := os.ReadFile(layerdLogs[r.name]); rerr == nil {
				more = "\n--- its layerd log (tail):\n" + tail(string(b), 12000)
			}
			e.t.Errorf("%v\n--- %s log (tail):\n%s%s", err, r.name, tail(r.logs.String(), 3000), more)
		}
	}
	for _, a := range e.agents {
		b, err := os.ReadFile(filepath.Join(paths.New(a.dataDir).Layers(), "layerd.log"))
		if err != nil {
			continue
		}
		if rep := racecheck.Report(string(b)); rep != "" {
			e.t.Errorf("layerd of %s: the race detector reported a data race:\n%s", a.node, rep)
		}
	}
}

// stop ends p with sig and waits for it.
func (p *proc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	if p.run != nil {
		p.run.sent = sig
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func (e *env) client(i int) *client.Client {
	return client.New("http://"+e.apiAddr[i], e.token, client.WithRetry(0))
}

// setup builds dsec and starts the cluster.
func setup(t *testing.T) *env { return setupCapacity(t, 12) }

// setupCapacity is setup with agents of room for capacity sandboxes each.
func setupCapacity(t *testing.T, capacity int) *env { return setupWith(t, capacity, 2, nil) }

// setupWith is setupCapacity with apis API servers; before, if set, runs
// once the network and etcd are up, before any agent starts (it may set
// e.agentArgs).
func setupWith(t *testing.T, capacity, apis int, before func(e *env)) *env {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, sandboxes)")
	}
	images := os.Getenv("DSEC_IMAGES_DIR")
	if images == "" {
		images = daemon.DefaultImagesDir
	}
	if _, err := os.Stat(filepath.Join(images, "debian", "image.json")); err != nil {
		t.Skip("default image missing (make setup)")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir, err := os.MkdirTemp("/var/lib", "dsec-cluster-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, maxSandboxes: capacity}
	t.Cleanup(e.teardown)
	// dsec and dsecd side by side: `dsec agent` runs the dsecd next to it.
	e.bin = filepath.Join(dir, "dsec")
	args := []string{"build", "-o", dir + "/"}
	if os.Getenv("DSEC_E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "github.com/dsec-dev/dsec/cmd/dsec", "github.com/dsec-dev/dsec/cmd/dsecd")...).CombinedOutput(); err != nil {
		t.Fatalf("build dsec: %v\n%s", err, out)
	}
	e.secret = filepath.Join(dir, "secret")
	if err := os.WriteFile(e.secret, []byte(randHex(24)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.network(3)
	e.startEtcd(3)
	if before != nil {
		before(e)
	}
	for _, a := range e.agents {
		e.startAgent(a, e.secret)
	}
	for i := 0; i < apis; i++ {
		e.startAPI(i)
	}
	return e
}

// network makes the hub address (on the host's loopback) and n
// agent namespaces, each with a veth pair and an address of its own.
func (e *env) network(n int) {
	t := e.t
	id := randHex(2)
	b, _ := rand.Int(rand.Reader, big.NewInt(200))
	net16 := fmt.Sprintf("10.%d.%d", 30+b.Int64(), 1+b.Int64()%250)
	e.hub = net16 + ".254"
	// The hub address sits on the host's loopback (no dummy link module needed):
	// the host answers it from every link, so each namespace reaches it.
	run(t, "ip", "addr", "add", e.hub+"/32", "dev", "lo")
	e.defer_(func() { _ = exec.Command("ip", "addr", "del", e.hub+"/32", "dev", "lo").Run() })
	for i := 1; i <= n; i++ {
		a := &agent{node: fmt.Sprintf("n%d", i), ns: fmt.Sprintf("dsec-e2e-%s-%d", id, i),
			hostIf: fmt.Sprintf("dsv%s%dh", id, i)}
		peer := fmt.Sprintf("dsv%s%dn", id, i)
		hostIP := fmt.Sprintf("%s.%d", net16, 4*i+1)
		nsIP := fmt.Sprintf("%s.%d", net16, 4*i+2)
		run(t, "ip", "netns", "add", a.ns)
		ns := a.ns
		e.defer_(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		// A node in a namespace of its own coordinates its egress in
		// /run/dsec/netpolicy-netns-INODE; one stopped with sandboxes (or
		// killed) keeps it for its next start, which never comes here.
		if fi, err := os.Stat("/run/netns/" + ns); err == nil {
			dir := fmt.Sprintf("/run/dsec/netpolicy-netns-%d", fi.Sys().(*syscall.Stat_t).Ino)
			e.defer_(func() { _ = os.RemoveAll(dir) })
		}
		run(t, "ip", "link", "add", a.hostIf, "type", "veth", "peer", "name", peer)
		hostIf := a.hostIf
		e.defer_(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
		run(t, "ip", "link", "set", peer, "netns", a.ns)
		run(t, "ip", "addr", "add", hostIP+"/30", "dev", a.hostIf)
		run(t, "ip", "link", "set", a.hostIf, "up")
		run(t, "ip", "-n", a.ns, "addr", "add", nsIP+"/30", "dev", peer)
		run(t, "ip", "-n", a.ns, "link", "set", peer, "up")
		run(t, "ip", "-n", a.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", a.ns, "route", "add", "default", "via", hostIP)
		a.addr = nsIP + ":7071"
		a.dataDir = filepath.Join(e.dir, a.node)
		e.agents = append(e.agents, a)
	}
}

func (e *env) startEtcd(n int) {
	var members, eps []string
	type m struct{ name, client, peer string }
	var ms []m
	for i := 1; i <= n; i++ {
		x := m{fmt.Sprintf("e%d", i), "http://" + freePort(e.t, e.hub), "http://" + freePort(e.t, e.hub)}
		ms = append(ms, x)
		members = append(members, x.name+"="+x.peer)
		eps = append(eps, x.client)
	}
	e.etcdEPs = strings.Join(eps, ",")
	token := "e2e-" + randHex(4)
	for _, x := range ms {
		p := &proc{name: "etcd " + x.name, args: []string{"etcd", "--name", x.name, "--data-dir", filepath.Join(e.dir, x.name),
			"--listen-client", x.client, "--listen-peer", x.peer, "--initial-cluster", strings.Join(members, ","),
			"--initial-cluster-token", token}}
		e.start(p)
		e.etcds = append(e.etcds, p)
	}
	e.waitFor("etcd members ready", 30*time.Second, func() error {
		for _, p := range e.etcds {
			if !strings.Contains(p.logs.String(), "etcd member ready") {
				return fmt.Errorf("%s not ready:\n%s", p.name, p.logs.String())
			}
		}
		return nil
	})
}

func (e *env) startAgent(a *agent, secret string) {
	a.proc = proc{name: "agent " + a.node, ns: a.ns, args: []string{"agent", "--etcd", e.etcdEPs, "--node-name", a.node,
		"--listen", a.addr, "--data-dir", a.dataDir, "--cluster-secret-file", secret, "--ttl", ttl.String(),
		"--labels", "zone=z" + a.node[1:], "--max-sandboxes", strconv.Itoa(e.maxSandboxes), "--log-level", "debug"}}
	if a.node == noFnCallNode {
		a.args = append(a.args, "--no-fncall")
	} else {
		a.args = append(a.args, "--max-fncalls", fmt.Sprint(fnCallsPerNode))
	}
	a.args = append(a.args, e.agentArgs...)
	e.start(&a.proc)
	e.waitFor(a.node+" serving", 30*time.Second, func() error {
		if !strings.Contains(a.logs.String(), "dsec agent serving") {
			return fmt.Errorf("not yet:\n%s", a.logs.String())
		}
		return nil
	})
}

func (e *env) startAPI(i int) {
	if len(e.apiAddr) <= i {
		e.apiAddr = append(e.apiAddr, freePort(e.t, "127.0.0.1"))
		e.apis = append(e.apis, nil)
	}
	if err := os.MkdirAll(e.blobs(), 0o755); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{name: fmt.Sprintf("apiserver %d", i), args: []string{"apiserver", "--etcd", e.etcdEPs, "--listen", e.apiAddr[i],
		"--data-dir", filepath.Join(e.dir, fmt.Sprintf("api%d", i)), "--cluster-secret-file", e.secret, "--log-level", "debug",
		"--blob-store", "dir:" + e.blobs(), "--quota-reconcile", "2s"}}
	p.args = append(p.args, e.apiArgs...)
	e.start(p)
	e.apis[i] = p
	e.waitFor(p.name+" listening", 30*time.Second, func() error {
		if !strings.Contains(p.logs.String(), "dsec apiserver listening") {
			return fmt.Errorf("not yet:\n%s", p.logs.String())
		}
		return nil
	})
	if e.token == "" {
		b, err := os.ReadFile(filepath.Join(e.dir, "api0", "token"))
		if err != nil {
			e.t.Fatalf("the first API server wrote no token: %v", err)
		}
		e.token = strings.TrimSpace(string(b))
	}
}

// waitFor polls f until it returns nil or d passes.
func (e *env) waitFor(what string, d time.Duration, f func() error) time.Duration {
	e.t.Helper()
	start := time.Now()
	var err error
	if !testwait.Until(d, func() bool { err = f(); return err == nil }) {
		e.t.Fatalf("%s: not within %s: %v", what, d, err)
	}
	return time.Since(start)
}

// placementCaughtUp waits until every running API server has taken a whole
// placement snapshot since now (dsec_placement_snapshots_total up by 2: the
// snapshot under way may have read the nodes before the caller's change), so
// a node's state the watchers already show is what the next create is placed by.
func (e *env) placementCaughtUp() {
	e.t.Helper()
	const name = "dsec_placement_snapshots_total"
	start := map[int]float64{}
	for i, addr := range e.apiAddr {
		if e.apis[i] == nil || e.apis[i].cmd.ProcessState != nil {
			continue
		}
		m, err := metricstest.Scrape("http://"+addr+"/metrics", e.token)
		if err != nil {
			e.t.Fatalf("API server %d /metrics: %v", i, err)
		}
		start[i] = m.Value(name)
	}
	e.waitFor("a placement snapshot on every API server", 10*time.Second, func() error {
		for i, n := range start {
			m, err := metricstest.Scrape("http://"+e.apiAddr[i]+"/metrics", e.token)
			if err != nil {
				return err
			}
			if v := m.Value(name); v < n+2 {
				return fmt.Errorf("API server %d: %s %v, from %v", i, name, v, n)
			}
		}
		return nil
	})
}

// teardown deletes every sandbox (through an API server, else by starting a
// one-node server with --cleanup-on-exit on each agent's data dir), stops every
// process and removes the network and the data.
func (e *env) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if e.token != "" && len(e.apiAddr) > 0 {
		for i := range e.apiAddr {
			if e.apis[i] == nil || e.apis[i].cmd.ProcessState != nil {
				continue
			}
			if list, err := e.client(i).List(ctx); err == nil {
				for _, sb := range list {
					_ = e.client(i).Delete(ctx, sb.ID)
				}
				break
			}
		}
	}
	for _, p := range e.apis {
		if p != nil {
			p.stop(syscall.SIGTERM)
		}
	}
	for _, a := range e.agents {
		a.stop(syscall.SIGTERM)
		if ents, _ := os.ReadDir(filepath.Join(a.dataDir, "sandboxes")); len(ents) > 0 {
			e.cleanupNode(a)
		}
	}
	for _, p := range e.etcds {
		p.stop(syscall.SIGTERM)
	}
	e.mu.Lock()
	fs := e.cleanup
	e.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	e.checkRuns()
	if e.t.Failed() {
		for _, p := range append(append([]*proc{}, e.etcds...), e.apis...) {
			if p != nil && p.logs != nil {
				e.t.Logf("--- %s log (tail):\n%s", p.name, tail(p.logs.String(), 3000))
			}
		}
		for _, a := range e.agents {
			if a.logs == nil {
				continue
			}
			e.t.Logf("--- %s log (tail):\n%s", a.name, tail(a.logs.String(), 3000))
		}
	}
	_ = os.RemoveAll(e.dir)
}

// cleanupNode deletes what an agent left behind by running a one-node server on
// its data dir with --cleanup-on-exit.
func (e *env) cleanupNode(a *agent) {
	p := &proc{name: "cleanup " + a.node, args: []string{"server", "--data-dir", a.dataDir, "--node-name", a.node,
		"--listen", freePort(e.t, "127.0.0.1"), "--cleanup-on-exit"}}
	e.start(p)
	testwait.Until(30*time.Second, func() bool { return strings.Contains(p.logs.String(), "dsec server listening") })
	p.stop(syscall.SIGTERM)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
