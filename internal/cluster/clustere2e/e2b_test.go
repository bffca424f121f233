package clustere2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// e2bProxy sends each request to one of the live API servers, picked at
// random, and remembers which one served what: the unmodified e2b SDK sees
// one address while its calls land on either API server. Its /_test/ calls let
// the SDK script ask which API server served a call (served?re=REGEXP on
// "METHOD PATH") and have the test kill or start an API server (kill?i=N,
// start?i=N): the test goroutine does that, as only it may fail the test.
type e2bProxy struct {
	e    *env
	ctl  chan ctlReq
	mu   sync.Mutex
	live map[int]bool
	log  []served // in order
}

type served struct {
	key string // "METHOD PATH"
	api int
}

type ctlReq struct {
	op   string // kill, start
	i    int
	done chan error
}

func (p *e2bProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_test/served":
		re, err := regexp.Compile(r.URL.Query().Get("re"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for i := len(p.log) - 1; i >= 0; i-- {
			if re.MatchString(p.log[i].key) {
				fmt.Fprint(w, p.log[i].api)
				return
			}
		}
		http.Error(w, "no such request served", http.StatusNotFound)
		return
	case "/_test/kill", "/_test/start":
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil || i < 0 || i >= len(p.e.apiAddr) {
			http.Error(w, "bad i", http.StatusBadRequest)
			return
		}
		req := ctlReq{op: filepath.Base(r.URL.Path), i: i, done: make(chan error, 1)}
		p.ctl <- req
		if err := <-req.done; err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		return
	}
	p.mu.Lock()
	var live []int
	for i := range p.e.apiAddr {
		if p.live[i] {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		p.mu.Unlock()
		http.Error(w, "no API server is up", http.StatusBadGateway)
		return
	}
	i := live[rand.IntN(len(live))]
	p.log = append(p.log, served{key: r.Method + " " + r.URL.Path, api: i})
	p.mu.Unlock()
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: p.e.apiAddr[i]})
		pr.Out.Host = pr.In.Host
	}, FlushInterval: -1}
	rp.ServeHTTP(w, r)
}

func (p *e2bProxy) setLive(i int, up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[i] = up
}

// TestE2BStatelessAPIServers drives two API servers with the unmodified e2b
// SDK (test/e2b), each call going to either one at random: a setTimeout is
// honoured after the API server that served it died (the sandbox's node keeps
// the deadline, not the API server), and a process started through an API
// server that is then killed is still listed, connectable, fed and killable
// through the other.
func TestE2BStatelessAPIServers(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	suite := filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "e2b")
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	if _, err := os.Stat(filepath.Join(suite, "node_modules", "e2b")); err != nil {
		// As test/e2b/run.sh does: the pinned SDK of package-lock.json.
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = suite
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("installing the e2b SDK: %v\n%s", err, out)
		}
	}
	e := setup(t)
	p := &e2bProxy{e: e, ctl: make(chan ctlReq), live: map[int]bool{}}
	for i := range e.apiAddr {
		p.live[i] = true
	}
	srv := httptest.NewServer(p)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := &syncBuffer{}
	cmd := exec.CommandContext(ctx, "node", "cluster-stateless.mjs")
	cmd.Dir = suite
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
		"E2B_API_KEY=e2b_"+e.token, "DSEC_TEST_CONTROL="+srv.URL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			t.Logf("SDK script output:\n%s", out.String())
			if err != nil {
				t.Fatalf("the SDK script failed: %v", err)
			}
			return
		case req := <-p.ctl:
			switch req.op {
			case "kill":
				p.setLive(req.i, false)
				e.apis[req.i].stop(syscall.SIGKILL)
				t.Logf("killed API server %d", req.i)
			case "start":
				e.startAPI(req.i)
				p.setLive(req.i, true)
				t.Logf("started API server %d", req.i)
			}
			req.done <- nil
		}
	}
}
