package clustere2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// newE2BProxy serves a proxy to every API server of e, all live.
func newE2BProxy(e *env) (*e2bProxy, *httptest.Server) {
	p := &e2bProxy{e: e, ctl: make(chan ctlReq), live: map[int]bool{}}
	for i := range e.apiAddr {
		p.live[i] = true
	}
	return p, httptest.NewServer(p)
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
// through the other; a directory watcher created through one API server is
// read through the other.
func TestE2BStatelessAPIServers(t *testing.T) {
	suite := e2bSuite(t)
	e := setup(t)
	p, srv := newE2BProxy(e)
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
			watchAcross(t, e)
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

// watchAcross creates a polling directory watcher through API server 0 and
// reads it through API server 1 (envd's Connect calls, in JSON).
func watchAcross(t *testing.T, e *env) {
	t.Helper()
	call := func(api int, path string, hdr map[string]string, body any) []byte {
		t.Helper()
		var rd io.Reader
		ctype := "application/json"
		switch b := body.(type) {
		case []byte:
			rd, ctype = bytes.NewReader(b), "application/octet-stream"
		default:
			j, _ := json.Marshal(b)
			rd = bytes.NewReader(j)
		}
		req, _ := http.NewRequest("POST", "http://"+e.apiAddr[api]+path, rd)
		req.Header.Set("Content-Type", ctype)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s through API server %d: %d %s", path, api, res.StatusCode, out)
		}
		return out
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(call(0, "/sandboxes", map[string]string{"X-API-KEY": "e2b_" + e.token}, map[string]any{"templateID": "base", "timeout": 120}), &sb); err != nil {
		t.Fatal(err)
	}
	envd := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken}
	call(0, "/filesystem.Filesystem/MakeDir", envd, map[string]any{"path": "/tmp/watched"})
	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	if err := json.Unmarshal(call(0, "/filesystem.Filesystem/CreateWatcher", envd, map[string]any{"path": "/tmp/watched"}), &cw); err != nil || cw.WatcherID == "" {
		t.Fatalf("create watcher: %+v, %v", cw, err)
	}
	call(1, "/files?path=/tmp/watched/a", envd, []byte("abc"))
	var ev struct {
		Events []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"events"`
	}
	if err := json.Unmarshal(call(1, "/filesystem.Filesystem/GetWatcherEvents", envd, map[string]any{"watcherId": cw.WatcherID}), &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Events) == 0 || ev.Events[0].Name != "a" || ev.Events[0].Type != "EVENT_TYPE_CREATE" {
		t.Fatalf("events of a watcher created through API server 0, read through 1: %+v", ev)
	}
	call(1, "/filesystem.Filesystem/RemoveWatcher", envd, map[string]any{"watcherId": cw.WatcherID})
	req, _ := http.NewRequest("DELETE", "http://"+e.apiAddr[0]+"/sandboxes/"+sb.SandboxID, nil)
	req.Header.Set("X-API-KEY", "e2b_"+e.token)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
}
