// Package metrics is dsec's Prometheus instrumentation, one package every
// component mounts: New makes a registry with dsec's metrics; Wrap is the
// session.Service decorator that counts creates, execs, FnCalls and errors the
// same way for every front end; TrajectoryStep counts trajectory steps and replays;
// Metrics is the node agent's Observer (create phases, reclaimed bytes);
// NodeCollector reads sandboxes by state, memory, capacity, load, layerd and
// FnCall pools at scrape time (nothing that can drift); HTTP counts requests by
// route pattern. Handler serves the text exposition. Labels are bounded: no
// sandbox IDs, raw paths or user-chosen strings, and unknown values fold into
// "other".
package metrics

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dsec-dev/dsec/pkg/api"
)

const namespace = "dsec"

// Label values.
const (
	ResultOK    = "ok"
	ResultError = "error"
	other       = "other"
)

// Options configures New.
type Options struct {
	// Backends are the backends this component serves (label values; others
	// fold into "other"); DefaultBackend names a create that names none.
	Backends       []string
	DefaultBackend string
	// NoProcess leaves out the Go runtime and process collectors (tests).
	NoProcess bool
}

// Metrics is one component's registry and instruments.
type Metrics struct {
	reg  *prometheus.Registry
	opts Options

	creates       *prometheus.CounterVec
	createSeconds *prometheus.HistogramVec
	phaseSeconds  *prometheus.HistogramVec
	rejections    *prometheus.CounterVec
	deletes       *prometheus.CounterVec
	execs         *prometheus.CounterVec
	execSeconds   *prometheus.HistogramVec
	sessionErrors *prometheus.CounterVec
	fnVerdicts    *prometheus.CounterVec
	fnSeconds     prometheus.Histogram
	trajSteps     *prometheus.CounterVec
	reclaimed     *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	httpSeconds   *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	rpcRequests   *prometheus.CounterVec
	rpcSeconds    *prometheus.HistogramVec
}

// Latency buckets: 0.5 ms to 60 s (creates of VMs take seconds under TCG).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns a registry with dsec's metrics.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), opts: opts}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: latencyBuckets}, labels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m.creates = counter("sandbox_creates_total", "Sandbox creates answered, by backend and result (ok, error).", "backend", "result")
	m.createSeconds = hist("sandbox_create_duration_seconds", "Latency of sandbox creates, by backend and result.", "backend", "result")
	m.phaseSeconds = hist("sandbox_create_phase_duration_seconds", "Latency of each phase of a create (placement, admission, image_mount, start; warm: taken from the warm pool), by backend.", "backend", "phase")
	m.rejections = counter("admission_rejections_total", "Creates the node's admission refused, by backend and error code.", "backend", "code")
	m.deletes = counter("sandbox_deletes_total", "Sandbox deletes answered, by result.", "result")
	m.execs = counter("execs_total", "Execs answered, by mode (exec, stream) and result (ok: the command ran, whatever its exit code).", "mode", "result")
	m.execSeconds = hist("exec_duration_seconds", "Latency of execs that ran, by mode.", "mode")
	m.sessionErrors = counter("session_errors_total", "Session operations that failed, by operation, error code and whether dsec's infrastructure (not the caller) failed.", "op", "code", "infrastructure")
	m.fnVerdicts = counter("fncall_verdicts_total", "FnCalls answered, by verdict.", "verdict")
	m.fnSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "fncall_duration_seconds", Help: "Latency of FnCalls.", Buckets: latencyBuckets})
	m.trajSteps = counter("trajectory_steps_total", "Trajectory steps, by operation and result (live: ran; replayed: answered from the log; refused: divergence or error).", "op", "result")
	m.reclaimed = counter("reclaimed_bytes_total", "Bytes of sandbox memory reclaimed, by how (pause: pause with reclaim; idle: idle reclaim).", "how")
	m.httpRequests = counter("http_requests_total", "HTTP requests answered, by route pattern, method and status.", "route", "method", "status")
	m.httpSeconds = hist("http_request_duration_seconds", "Latency of HTTP requests (until the handler returned), by route pattern and method.", "route", "method")
	m.errors = counter("errors_total", "Error answers dsec's API sent, by error code and infrastructure flag.", "code", "infrastructure")
	m.rpcRequests = counter("rpc_requests_total", "Node RPC requests this node answered, by procedure (the unary method, e.g. Create, or the stream, e.g. ExecStream) and code (ok or the error code).", "procedure", "code")
	m.rpcSeconds = hist("rpc_request_duration_seconds", "Latency of node RPC requests (a stream: until it ended), by procedure.", "procedure")
	m.reg.MustRegister(m.creates, m.createSeconds, m.phaseSeconds, m.rejections, m.deletes, m.execs, m.execSeconds,
		m.sessionErrors, m.fnVerdicts, m.fnSeconds, m.trajSteps, m.reclaimed, m.httpRequests, m.httpSeconds, m.errors,
		m.rpcRequests, m.rpcSeconds)
	if !opts.NoProcess {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: namespace}))
	}
	return m
}

// Register adds collectors (a NodeCollector) to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Registry is the underlying registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the text exposition of every registered metric. It does no
// authentication: mount it behind the API's token check, or on a listener of
// its own the operator chose to leave open.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// backend bounds a backend label value.
func (m *Metrics) backend(b string) string {
	if b == "" {
		b = m.opts.DefaultBackend
	}
	if b == "" || !slices.Contains(m.opts.Backends, b) {
		return other
	}
	return b
}

// verdicts are the FnCall verdict label values.
var verdicts = []string{api.VerdictAccepted, api.VerdictWrongAnswer, api.VerdictTimeLimit, api.VerdictMemoryLimit,
	api.VerdictRuntimeError, api.VerdictOutputLimit, api.VerdictCompileError, api.VerdictSystemError}

// errorCodes are the error code label values.
var errorCodes = []string{string(api.CodeUnauthorized), string(api.CodeInvalidArgument), string(api.CodeNotFound),
	string(api.CodeAlreadyExists), string(api.CodeConflict), string(api.CodePayloadTooLarge),
	string(api.CodeResourceExhausted), string(api.CodeDeadlineExceeded), string(api.CodeSandboxGone),
	string(api.CodeUnavailable), string(api.CodeInternal), string(api.CodeNotImplemented), string(api.CodeBadGateway),
	string(api.CodeTrajectoryDiverged), string(api.CodeOutcomeUnknown), string(api.CodeTrajectorySandboxLost),
	string(api.CodeNodeLost), string(api.CodeStartFailed)}

func codeLabel(c api.Code) string { return bounded(string(c), errorCodes) }

func bounded(v string, set []string) string {
	if slices.Contains(set, v) {
		return v
	}
	return other
}

func seconds(t0 time.Time) float64 { return time.Since(t0).Seconds() }

func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultOK
}
