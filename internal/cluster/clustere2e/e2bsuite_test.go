package clustere2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2BSuiteTwoAPIServers runs the E2B acceptance files of test/e2b (the
// unmodified e2b SDK) against two API servers of a cluster, each call going to
// either one at random: everything they check through one `dsec server` holds
// when the front end is stateless and the SDK's calls alternate. DSEC_E2B_FILES
// (space-separated) picks the files; by default all but the desktop, code
// interpreter and template-build files, whose images and builds are checked
// against `dsec server` by test/e2b/run.sh.
func TestE2BSuiteTwoAPIServers(t *testing.T) {
	suite := e2bSuite(t)
	files := []string{"commands.test.mjs", "files.test.mjs", "lifecycle.test.mjs", "users.test.mjs",
		"pty.test.mjs", "envd06.test.mjs", "snapshots.test.mjs", "misc.test.mjs", "ports.test.mjs"}
	if f := os.Getenv("DSEC_E2B_FILES"); f != "" {
		files = strings.Fields(f)
	}
	e := setup(t)
	p, srv := newE2BProxy(e)
	defer srv.Close()
	// The sandbox domain is the one address the SDK knows, as an operator
	// sets it to the load balancer's (getHost must name it).
	e.apiArgs = []string{"--e2b-domain", "localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]}
	for i := range e.apis {
		e.apis[i].stop(syscall.SIGTERM)
		e.startAPI(i)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := &syncBuffer{}
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-concurrency=1", "--test-timeout=120000"}, files...)...)
	cmd.Dir = suite
	cmd.Stdout, cmd.Stderr = out, out
	// The agents run in network namespaces of their own, from which the test
	// host ports.test.mjs attaches to the host's namespace is not routed.
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY=e2b_"+e.token,
		"DSEC_E2B_NO_OUTSIDE_HOST=the cluster's agents run in network namespaces the test host is not routed from")
	err := cmd.Run()
	t.Logf("node --test output:\n%s", out.String())
	if err != nil {
		t.Fatalf("the E2B acceptance files failed through two API servers: %v", err)
	}
	served := map[int]int{}
	p.mu.Lock()
	for _, s := range p.log {
		served[s.api]++
	}
	p.mu.Unlock()
	if served[0] == 0 || served[1] == 0 {
		t.Fatalf("calls per API server %v: both must have served", served)
	}
	t.Logf("calls per API server: %v", served)
}
