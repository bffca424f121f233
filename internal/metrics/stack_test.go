package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/driver/mock"
	"github.com/dsec-dev/dsec/internal/images"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/server"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/client"
)

const token = "metrics-test-token"

// stack is a node as the daemon assembles it, on the mock driver: agent ->
// metrics decorator -> trajectory log -> /v1 server, behind the request-ID,
// tracing and HTTP-metrics middleware, with /metrics behind the token.
type stack struct {
	m     *metrics.Metrics
	mgr   *agent.Manager
	spans *tracetest.SpanRecorder
	url   string
	cl    *client.Client
}

// tinyImages makes an image the mock driver can start (an /etc/passwd is all
// the agent reads).
func tinyImages(t testing.TB) *images.Store {
	imgs := t.TempDir()
	rootfs := filepath.Join(imgs, "tiny", "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imgs, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return &images.Store{Dir: imgs, Default: "tiny"}
}

// newStack starts the node; wrap (optional) wraps the mock driver.
func newStack(t testing.TB, wrap func(driver.Driver) driver.Driver) *stack {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp, err := tracing.New(context.Background(), tracing.Config{Options: []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(rec)}})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{Backends: []string{mock.Name}, DefaultBackend: mock.Name, NoProcess: true})
	var drv driver.Driver
	drv, err = mock.New(mock.Config{Host: mock.NewHost(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		drv = wrap(drv)
	}
	mgr, err := agent.New(context.Background(), agent.Config{DataDir: t.TempDir(), Driver: drv, Images: tinyImages(t),
		Node: "test", Tracer: tp, Observer: m, MaxCreating: 64})
	if err != nil {
		t.Fatal(err)
	}
	msvc := m.Wrap(mgr, tp, nil)
	if err := m.Register(m.NewNodeCollector(mgr, nil, nil)); err != nil {
		t.Fatal(err)
	}
	tsvc := trajectory.Wrap(msvc, m.WrapStore(trajectory.NewMem()), trajectory.Options{})
	srv := server.New(tsvc, server.Options{Token: token, Trajectories: tsvc, QoS: msvc})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireToken(m.Handler()))
	mux.Handle("/", srv.Handler())
	route := func(r *http.Request) string {
		if r.URL.Path == "/metrics" {
			return "/metrics"
		}
		return srv.Route(r)
	}
	hs := httptest.NewServer(tracing.Middleware(tp, route, m.HTTP(route, mux)))
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := mgr.DeleteAll(ctx); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		mgr.Close()
		_ = tp.Shutdown(ctx)
	})
	return &stack{m: m, mgr: mgr, spans: rec, url: hs.URL, cl: client.New(hs.URL, token)}
}

func requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// scrape reads /metrics with the token and parses it with Prometheus's text
// parser.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// value is a sample's value: a counter's or gauge's, or for NAME_count a
// histogram's sample count. labels are "k=v" pairs that must all match; a
// series that does not exist is 0.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	histCount := false
	f := fams[name]
	if f == nil && strings.HasSuffix(name, "_count") {
		f, histCount = fams[strings.TrimSuffix(name, "_count")], true
	}
	if f == nil {
		return 0
	}
	sum := 0.0
next:
	for _, mt := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range mt.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case histCount:
			sum += float64(mt.GetHistogram().GetSampleCount())
		case mt.Counter != nil:
			sum += mt.GetCounter().GetValue()
		case mt.Gauge != nil:
			sum += mt.GetGauge().GetValue()
		}
	}
	return sum
}
