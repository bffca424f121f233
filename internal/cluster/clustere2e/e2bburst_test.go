package clustere2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// e2bSuite is test/e2b with the pinned e2b SDK installed (as test/e2b/run.sh
// installs it); the test is skipped without node.
func e2bSuite(t *testing.T) string {
	t.Helper()
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
	return suite
}

// createStatuses counts the API servers' answers to creates as the SDK
// received them: by status, and 429s without a Retry-After the SDK can use.
type createStatuses struct {
	next http.Handler
	mu   sync.Mutex
	by   map[int]int
	bad  int // 429 without an integer Retry-After
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *createStatuses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/sandboxes" && r.URL.Path != "/v2/sandboxes") {
		c.next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	c.next.ServeHTTP(sw, r)
	code := sw.code
	if code == 0 {
		code = http.StatusOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by[code]++
	if code == http.StatusTooManyRequests {
		if _, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil {
			c.bad++
		}
	}
}

// TestE2BCreateBurst: DSEC_CREATES (default 1,000) Sandbox.create at once
// through the unmodified e2b SDK against two API servers, each call going to
// either: every create succeeds (an API server may refuse with 429 and a
// Retry-After, which the SDK waits out and retries), and every sandbox is
// killed.
func TestE2BCreateBurst(t *testing.T) {
	suite := e2bSuite(t)
	n := 1000
	if v := os.Getenv("DSEC_CREATES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("DSEC_CREATES=%q", v)
		}
	}
	// Room for all of them with a third to spare, so that placement must
	// spread them over the three nodes.
	e := setupCapacity(t, n/2+1)
	p := &e2bProxy{e: e, ctl: make(chan ctlReq), live: map[int]bool{}}
	for i := range e.apiAddr {
		p.live[i] = true
	}
	st := &createStatuses{next: p, by: map[int]int{}}
	srv := httptest.NewServer(st)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "cluster-creates.mjs")
	cmd.Dir = suite
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
		"E2B_API_KEY=e2b_"+e.token, "DSEC_CREATES="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	t.Logf("SDK script: %s", out)
	st.mu.Lock()
	t.Logf("create answers by status: %v", st.by)
	bad := st.bad
	st.mu.Unlock()
	if err != nil {
		t.Errorf("the SDK script failed: %v", err)
	}
	if bad > 0 {
		t.Errorf("%d creates refused with 429 without an integer Retry-After", bad)
	}
}
