package e2b

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/codeint"
	"github.com/dsec-dev/dsec/pkg/api"
)

// codeIntEnv is the front end over the mock node (processes are host
// processes working in the sandbox's root; ports are the host's loopback) with
// one template service of the test's.
func codeIntEnv(t *testing.T, svc templateService) (*agenttest.Node, *httptest.Server) {
	t.Helper()
	n := agenttest.NewNode(t)
	h := New(n, Options{Authorize: func(k string) bool { return k == "k" }, Secret: []byte("test")})
	h.services = map[string]templateService{"tiny": svc}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return n, srv
}

func createTemplate(t *testing.T, srv *httptest.Server, template string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"`+template+`","envVars":{"FROM_CREATE":"yes"}}`))
	req.Header.Set("X-API-Key", "k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return res, body
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A template with a service: create writes its files, starts it with create's
// envs, and answers only once it serves on its port.
func TestTemplateServiceStartsBeforeCreateAnswers(t *testing.T) {
	port := freePort(t)
	// The service writes create's env into a file, then serves its
	// directory (so GET /health is the file "health") after a delay that
	// create must wait out.
	script := `import http.server, os, time
open("env", "w").write(os.environ.get("FROM_CREATE", ""))
time.sleep(0.5)
http.server.ThreadingHTTPServer(("127.0.0.1", ` + strconv.Itoa(port) + `), http.server.SimpleHTTPRequestHandler).serve_forever()
`
	n, srv := codeIntEnv(t, templateService{name: "test-service",
		files: map[string][]byte{"/srv/health": []byte("OK"), "/srv/serve.py": []byte(script)},
		req:   api.ExecRequest{Cmd: []string{"python3", "serve.py"}, Cwd: "/srv"},
		port:  port, start: 20 * time.Second})
	t0 := time.Now()
	res, body := createTemplate(t, srv, "tiny")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", res.StatusCode, body)
	}
	if d := time.Since(t0); d < 500*time.Millisecond {
		t.Errorf("create answered after %s, before the service served", d)
	}
	id := body["sandboxID"].(string)
	hres, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/health")
	if err != nil || hres.StatusCode != http.StatusOK {
		t.Fatalf("the service does not serve after create: %v %v", hres, err)
	}
	hres.Body.Close()
	procs, err := n.ListProcesses(t.Context(), id)
	if err != nil || len(procs) != 1 || procs[0].Labels[labelService] != "test-service" || !procs[0].Running {
		t.Fatalf("processes: %+v %v", procs, err)
	}
	fs, err := n.FS(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	rc, _, err := fs.Open(t.Context(), "/srv/env")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b [16]byte
	k, _ := rc.Read(b[:])
	if string(b[:k]) != "yes" {
		t.Errorf("the service's env FROM_CREATE = %q, want create's envVars", b[:k])
	}

	// Another template starts nothing.
	res, body = createTemplate(t, srv, "base")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create base: %d %v", res.StatusCode, body)
	}
	if procs, _ := n.ListProcesses(t.Context(), body["sandboxID"].(string)); len(procs) != 0 {
		t.Errorf("base runs %d processes", len(procs))
	}
}

// A service that ends before it serves fails create with its stderr, E2B-shaped,
// and leaves no sandbox behind.
func TestTemplateServiceFailureRemovesSandbox(t *testing.T) {
	n, srv := codeIntEnv(t, templateService{name: "broken",
		req:  api.ExecRequest{Shell: "echo no kernel here >&2; exit 3"},
		port: freePort(t), start: 20 * time.Second})
	res, body := createTemplate(t, srv, "tiny")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("create: %d %v", res.StatusCode, body)
	}
	if msg, _ := body["message"].(string); !strings.Contains(msg, "no kernel here") || body["code"] == nil {
		t.Errorf("error body %v: want {code, message} naming the service's stderr", body)
	}
	if all, _ := n.List(t.Context()); len(all) != 0 {
		t.Errorf("%d sandboxes left after a failed create", len(all))
	}
}

// The code interpreter's template maps to its service: the embedded server,
// run as root in /home/user (as E2B's) on E2B's interpreter port.
func TestCodeInterpreterTemplate(t *testing.T) {
	svc, ok := templateServices()[CodeInterpreterTemplate]
	if !ok {
		t.Fatal("no service for code-interpreter-v1")
	}
	if svc.port != 49999 || svc.req.User != "root" || svc.req.Cwd != "/home/user" {
		t.Errorf("service %+v: want port 49999, root, /home/user", svc)
	}
	src := string(svc.files[codeint.ServerPath])
	for _, route := range []string{`"health"`, `"execute"`, `"contexts"`, `"restart"`} {
		if !strings.Contains(src, route) {
			t.Errorf("the embedded server has no %s route", route)
		}
	}
	if !slices.Contains(svc.req.Cmd, codeint.ServerPath) || svc.req.Cmd[len(svc.req.Cmd)-1] != "--supervise" {
		t.Errorf("cmd %v does not run %s supervised", svc.req.Cmd, codeint.ServerPath)
	}
	for _, k := range []string{codeint.JSKernelPath, codeint.RKernelPath, codeint.JavaKernelPath} {
		if len(svc.files[k]) == 0 {
			t.Errorf("the kernel %s is not written", k)
		}
	}
}
