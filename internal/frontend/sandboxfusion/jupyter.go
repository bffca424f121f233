package sandboxfusion

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// SandboxFusion's Jupyter mode (POST /run_jupyter): a list of cells run in
// order in one fresh Jupyter kernel, each cell's stdout, stderr, rich outputs
// and errors answered apart. A FnCall runs one program in the judge image; a
// kernel needs the code interpreter's image (scripts/codeint-image.sh: the
// judge image plus Debian's ipykernel), so each call creates a sandbox of that
// image (loopback only, as SandboxFusion's netns_no_bridge), writes the
// request's files and jupyter/driver.py into it, runs the driver and deletes
// the sandbox.

// DefaultJupyterImage is the image /run_jupyter's sandboxes are created from.
const DefaultJupyterImage = "code-interpreter-v1"

// JupyterSandboxes is what /run_jupyter needs of the session service.
type JupyterSandboxes interface {
	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error)
	FS(ctx context.Context, id string) (session.FS, error)
}

// Where the driver works in the sandbox.
const (
	jupyterWorkDir = "/home/user" // the kernel's cwd; files and fetch_files are relative to it
	jupyterDir     = "/opt/dsec/sfjupyter"
	jupyterDriver  = jupyterDir + "/driver.py"
	jupyterOutput  = jupyterDir + "/output.json"
)

// Defaults of SandboxFusion's RunJupyterRequest, and the driver's grace on top
// of total_timeout (SandboxFusion runs its driver with total_timeout + 10 s).
const (
	defaultTotalTimeout = 45.0
	driverGrace         = 10 * time.Second
	// jupyterTTLSlack bounds a sandbox whose delete failed.
	jupyterTTLSlack = 120 * time.Second
)

//go:embed jupyter/driver.py
var jupyterDriverPy []byte

// RunJupyterRequest is the body of POST /run_jupyter.
type RunJupyterRequest struct {
	Cells []string `json:"cells"`
	// CellTimeout is accepted and, as in SandboxFusion, not applied on its
	// own: TotalTimeout bounds the run.
	CellTimeout   *float64           `json:"cell_timeout"`
	TotalTimeout  *float64           `json:"total_timeout"`
	MemoryLimitMB *int64             `json:"memory_limit_MB"`
	Kernel        string             `json:"kernel"`
	Files         map[string]*string `json:"files"`
	FetchFiles    []string           `json:"fetch_files"`
}

// RunJupyterResponse is the answer of POST /run_jupyter.
type RunJupyterResponse struct {
	Status  string            `json:"status"`
	Message string            `json:"message"`
	Driver  *CommandRunResult `json:"driver"`
	Cells   []CellRunResult   `json:"cells"`
	// ExecutorPodName is always null (SandboxFusion's pod name).
	ExecutorPodName *string           `json:"executor_pod_name"`
	Files           map[string]string `json:"files"`
}

// CellRunResult is one cell's outputs.
type CellRunResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Display holds each rich output's data by MIME type (the cell's value,
	// display() calls, figures as image/png).
	Display []map[string]any `json:"display"`
	// Error holds each uncaught exception's ename, evalue and traceback.
	Error []map[string]any `json:"error"`
}

// jupyterCall is a validated RunJupyterRequest.
type jupyterCall struct {
	cells  []string
	kernel string
	total  time.Duration
	memory int64
	files  map[string][]byte
	fetch  []string
}

func (h *Handler) jupyterCall(req RunJupyterRequest) (jupyterCall, error) {
	if req.Cells == nil {
		return jupyterCall{}, errdefs.Invalid("cells is required")
	}
	kernel := req.Kernel
	if kernel == "" {
		kernel = "python3"
	}
	if kernel != "python3" {
		return jupyterCall{}, errdefs.Invalid("kernel %q is not served (python3 is)", kernel)
	}
	total := defaultTotalTimeout
	if req.TotalTimeout != nil {
		total = *req.TotalTimeout
	}
	if math.IsNaN(total) || total <= 0 || total > maxTimeout {
		return jupyterCall{}, errdefs.Invalid("total_timeout must be in (0, %g] seconds, got %g", maxTimeout, total)
	}
	if req.CellTimeout != nil && (math.IsNaN(*req.CellTimeout) || *req.CellTimeout < 0) {
		return jupyterCall{}, errdefs.Invalid("cell_timeout must be 0 or more seconds, got %g", *req.CellTimeout)
	}
	c := jupyterCall{cells: req.Cells, kernel: kernel, total: time.Duration(total * float64(time.Second)),
		memory: h.opts.DefaultMemoryBytes, files: map[string][]byte{}}
	if req.MemoryLimitMB != nil && *req.MemoryLimitMB > 0 {
		if *req.MemoryLimitMB > 1<<20 {
			return jupyterCall{}, errdefs.Invalid("memory_limit_MB %d is too large", *req.MemoryLimitMB)
		}
		c.memory = *req.MemoryLimitMB << 20
	}
	for p, content := range req.Files {
		if content == nil {
			continue
		}
		name, err := workPath("files", p)
		if err != nil {
			return jupyterCall{}, err
		}
		b, err := base64.StdEncoding.DecodeString(*content)
		if err != nil {
			return jupyterCall{}, errdefs.Invalid("files[%q]: not base64: %v", p, err)
		}
		c.files[name] = b
	}
	for _, p := range req.FetchFiles {
		if _, err := workPath("fetch_files", p); err != nil {
			return jupyterCall{}, err
		}
	}
	c.fetch = req.FetchFiles
	return c, nil
}

// workPath is p inside the kernel's work directory, or invalid_argument.
func workPath(field, p string) (string, error) {
	name := path.Clean(p)
	if path.IsAbs(name) || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return "", errdefs.Invalid("%s: %q must be a path inside the work directory", field, p)
	}
	return path.Join(jupyterWorkDir, name), nil
}

// runJupyter serves POST /run_jupyter.
func (h *Handler) runJupyter(ctx context.Context, req RunJupyterRequest) (RunJupyterResponse, error) {
	if h.opts.Sandboxes == nil {
		return RunJupyterResponse{}, errdefs.New(api.CodeNotImplemented, "/run_jupyter is not served here: no sandbox service")
	}
	call, err := h.jupyterCall(req)
	if err != nil {
		return RunJupyterResponse{}, err
	}
	sbs := h.opts.Sandboxes
	sb, err := sbs.Create(ctx, api.CreateSandboxRequest{Image: h.opts.JupyterImage, MemoryBytes: call.memory,
		TTLSeconds: int64((call.total + driverGrace + jupyterTTLSlack) / time.Second),
		Labels:     map[string]string{"dsec.frontend": "sandboxfusion-jupyter"}})
	if err != nil {
		return RunJupyterResponse{}, fmt.Errorf("run_jupyter: create a %s sandbox: %w", h.opts.JupyterImage, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := sbs.Delete(dctx, sb.ID); err != nil && !errdefs.Is(err, api.CodeNotFound) {
			h.log.WarnContext(ctx, "run_jupyter: delete sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	fs, err := sbs.FS(ctx, sb.ID)
	if err != nil {
		return RunJupyterResponse{}, fmt.Errorf("run_jupyter: %w", err)
	}
	defer fs.Close()
	call.files[jupyterDriver] = jupyterDriverPy
	if err := writeFiles(ctx, fs, call.files); err != nil {
		return RunJupyterResponse{}, fmt.Errorf("run_jupyter: %w", err)
	}
	in, err := json.Marshal(map[string]any{"kernel": call.kernel, "cells": call.cells, "output": jupyterOutput})
	if err != nil {
		return RunJupyterResponse{}, errdefs.Internal(err, "run_jupyter: encode the cells")
	}
	res, err := sbs.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", jupyterDriver}, Cwd: jupyterWorkDir, User: "root",
		Stdin: string(in), TimeoutMs: (call.total + driverGrace).Milliseconds(), MaxOutputBytes: h.opts.OutputBytes,
		Env: map[string]string{"HOME": jupyterWorkDir, "PYDEVD_DISABLE_FILE_VALIDATION": "1",
			"MPLBACKEND": "module://matplotlib_inline.backend_inline"}})
	if err != nil {
		return RunJupyterResponse{}, fmt.Errorf("run_jupyter: run the driver: %w", err)
	}
	out := RunJupyterResponse{Status: StatusFailed, Driver: driverResult(res), Cells: []CellRunResult{}, Files: map[string]string{}}
	if out.Driver.Status != CmdFinished {
		return out, nil
	}
	b, err := readFile(ctx, fs, jupyterOutput, 1<<62)
	if errdefs.Is(err, api.CodeNotFound) { // the driver failed before writing it
		return out, nil
	}
	if err != nil {
		return RunJupyterResponse{}, fmt.Errorf("run_jupyter: read the cells' output: %w", err)
	}
	var cells struct {
		Status string          `json:"status"`
		Cells  []CellRunResult `json:"cells"`
	}
	if err := json.Unmarshal(b, &cells); err != nil {
		return RunJupyterResponse{}, errdefs.Internal(err, "run_jupyter: the driver's output")
	}
	if cells.Status != CmdFinished {
		return out, nil
	}
	for i := range cells.Cells {
		if cells.Cells[i].Display == nil {
			cells.Cells[i].Display = []map[string]any{}
		}
		if cells.Cells[i].Error == nil {
			cells.Cells[i].Error = []map[string]any{}
		}
	}
	out.Status, out.Cells = StatusSuccess, cells.Cells
	for _, p := range call.fetch {
		name, _ := workPath("fetch_files", p)
		b, err := readFile(ctx, fs, name, h.opts.OutputBytes)
		switch {
		case errdefs.Is(err, api.CodeNotFound) || errdefs.Is(err, api.CodeInvalidArgument):
			continue // as SandboxFusion: only the regular files that are there
		case err != nil:
			return RunJupyterResponse{}, fmt.Errorf("run_jupyter: fetch %s: %w", p, err)
		}
		out.Files[p] = base64.StdEncoding.EncodeToString(b)
	}
	return out, nil
}

// driverResult is the driver's run as SandboxFusion reports a command's.
func driverResult(res api.ExecResult) *CommandRunResult {
	r := &CommandRunResult{Status: CmdFinished, ExecutionTime: ptr(res.DurationMs / 1000),
		ReturnCode: ptr(res.ExitCode), Stdout: ptr(res.Stdout), Stderr: ptr(res.Stderr)}
	switch {
	case res.TimedOut:
		r.Status, r.ReturnCode = CmdTimeLimit, nil
	case res.Error != "":
		r.Status, r.ReturnCode = CmdError, nil
		r.Stderr = ptr(strings.TrimSpace(res.Error + "\n" + res.Stderr))
	case res.Signal != "": // -N, as SandboxFusion reports a signal
		if n := unix.SignalNum(res.Signal); n != 0 {
			r.ReturnCode = ptr(-int(n))
		}
	}
	return r
}

func writeFiles(ctx context.Context, fs session.FS, files map[string][]byte) error {
	for name, content := range files {
		dir := path.Dir(name)
		if _, err := fs.Mkdir(ctx, dir, 0o755, true); err != nil && !errdefs.Is(err, api.CodeAlreadyExists) {
			return fmt.Errorf("mkdir %s: %w", dir, err)
		}
		if _, err := fs.WriteFile(ctx, name, 0o644, bytes.NewReader(content), int64(len(content))); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// readFile reads a regular file of at most max bytes (a larger one is
// resource_exhausted; anything but a regular file invalid_argument).
func readFile(ctx context.Context, fs session.FS, name string, max int64) ([]byte, error) {
	rc, info, err := fs.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if info.Type != "" && info.Type != "file" {
		return nil, errdefs.Invalid("%s is not a regular file", name)
	}
	if info.Size > max {
		return nil, errdefs.New(api.CodeResourceExhausted, "%s is %d bytes, more than %d", name, info.Size, max)
	}
	return io.ReadAll(io.LimitReader(rc, max))
}
