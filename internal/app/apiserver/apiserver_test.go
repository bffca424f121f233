package apiserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/apiserver"
	appapi "github.com/dsec-dev/dsec/internal/app/apiserver"
	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestPartialStartReleasesEverything fails `dsec apiserver`'s start-up right
// after each of its steps in turn and checks that the failed start left no
// listener, no goroutine of its background work, and no election lease in
// etcd; then a start that succeeds serves /v1 and its stop leaves nothing.
func TestPartialStartReleasesEverything(t *testing.T) {
	eps, cli := apptest.Etcd(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := apptest.FreePorts(t, 2)
	var logs bytes.Buffer
	cfg := appapi.Config{
		API: apiserver.Config{DataDir: t.TempDir(), Name: "partial", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			ElectionTTL: 2 * time.Second, QuotaReconcile: time.Hour},
		Etcd: cluster.ClientConfig{Endpoints: eps}, SecretFile: secretFile,
		Listen: addrs[0], MetricsListen: addrs[1], ShutdownTimeout: 10 * time.Second,
	}
	check := func(when string) {
		t.Helper()
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Errorf("%s: listener %s left: %v", when, a, err)
				continue
			}
			l.Close()
		}
		testwait.Until(5*time.Second, func() bool { return len(apptest.Leased(t, cli)) == 0 })
		if keys := apptest.Leased(t, cli); len(keys) > 0 {
			t.Errorf("%s: leased keys left in etcd (the election): %q", when, keys)
		}
	}
	steps := appapi.StepNames()
	for _, want := range []string{"etcd", "watcher", "router", "listen", "listen-metrics"} {
		if !strings.Contains(" "+strings.Join(steps, " ")+" ", " "+want+" ") {
			t.Fatalf("no step %s in %q", want, steps)
		}
	}
	for _, step := range steps {
		c := cfg
		c.FailAfter = step
		err := appapi.Run(context.Background(), c)
		if !errors.Is(err, lifecycle.ErrInjected) {
			t.Fatalf("start failing after %s: %v\n%s", step, err, logs.String())
		}
		check("after a start that failed after " + step)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- appapi.Run(ctx, cfg) }()
	testwait.For(t, 30*time.Second, "the apiserver listening", func() bool {
		resp, err := http.Get("http://" + addrs[0] + "/v1/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("health: %d %s", resp.StatusCode, b)
			}
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("apiserver stopped: %v\n%s", err, logs.String())
		default:
		}
		return false
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("apiserver stop: %v", err)
	}
	check("after a stop")
	if !strings.Contains(logs.String(), "dsec apiserver listening") {
		t.Error("no listening line")
	}
}
