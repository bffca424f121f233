package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// jupyterNode is a fake node for /run_jupyter: its sandboxes are file maps,
// and its exec of the driver answers every cell with the cell's code as
// stdout (as a kernel would print it), written where the driver writes.
type jupyterNode struct {
	session.Unimplemented
	name    string
	mu      sync.Mutex
	files   map[string]map[string][]byte // sandbox → path → content
	deleted []string
	execs   []api.ExecRequest
}

func (n *jupyterNode) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := api.Sandbox{ID: session.NewID(n.name), Backend: api.BackendContainer, State: api.StateRunning, Image: req.Image, CreatedAt: time.Now()}
	n.files[sb.ID] = map[string][]byte{}
	return sb, nil
}

func (n *jupyterNode) Delete(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deleted = append(n.deleted, id)
	delete(n.files, id)
	return nil
}

func (n *jupyterNode) Exec(_ context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	var in struct {
		Cells  []string `json:"cells"`
		Output string   `json:"output"`
	}
	if err := json.Unmarshal([]byte(req.Stdin), &in); err != nil {
		return api.ExecResult{ExitCode: 2, Stderr: err.Error()}, nil
	}
	type cell struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Display []any  `json:"display"`
		Error   []any  `json:"error"`
	}
	out := struct {
		Status string `json:"status"`
		Cells  []cell `json:"cells"`
	}{Status: "Finished"}
	for _, c := range in.Cells {
		out.Cells = append(out.Cells, cell{Stdout: c})
	}
	b, _ := json.Marshal(out)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.execs = append(n.execs, req)
	fs, ok := n.files[id]
	if !ok {
		return api.ExecResult{}, errdefs.New(api.CodeNotFound, "no sandbox %s", id)
	}
	fs[in.Output] = b
	return api.ExecResult{Stdout: "kernel started\n", DurationMs: 20}, nil
}

func (n *jupyterNode) FS(_ context.Context, id string) (session.FS, error) {
	return jupyterFS{n: n, id: id}, nil
}

// jupyterFS is a sandbox's file map (the calls /run_jupyter makes).
type jupyterFS struct {
	n  *jupyterNode
	id string
}

func (f jupyterFS) Open(_ context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	b, ok := f.n.files[f.id][p]
	if !ok {
		return nil, api.FileInfo{}, errdefs.New(api.CodeNotFound, "%s: no such file", p)
	}
	return io.NopCloser(bytes.NewReader(b)), api.FileInfo{Path: p, Size: int64(len(b)), Type: "file"}, nil
}

func (f jupyterFS) WriteFile(_ context.Context, p string, _ os.FileMode, r io.Reader, _ int64) (api.FileInfo, error) {
	b, err := io.ReadAll(r)
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	f.n.files[f.id][p] = b
	return api.FileInfo{Path: p, Size: int64(len(b)), Type: "file"}, err
}

func (f jupyterFS) Mkdir(_ context.Context, p string, _ os.FileMode, _ bool) (api.FileInfo, error) {
	return api.FileInfo{Path: p, Type: "dir"}, nil
}

func (f jupyterFS) Stat(_ context.Context, p string) (api.FileInfo, error) {
	return api.FileInfo{}, errdefs.New(api.CodeNotImplemented, "stat")
}
func (f jupyterFS) List(context.Context, string) ([]api.FileInfo, error) {
	return nil, errdefs.New(api.CodeNotImplemented, "list")
}
func (f jupyterFS) Remove(context.Context, string, bool) error {
	return errdefs.New(api.CodeNotImplemented, "remove")
}
func (f jupyterFS) Rename(context.Context, string, string) error {
	return errdefs.New(api.CodeNotImplemented, "rename")
}
func (f jupyterFS) WriteTar(context.Context, string, io.Writer) error {
	return errdefs.New(api.CodeNotImplemented, "tar")
}
func (f jupyterFS) ExtractTar(context.Context, string, io.Reader) error {
	return errdefs.New(api.CodeNotImplemented, "tar")
}
func (f jupyterFS) Close() error { return nil }

// TestSandboxFusionJupyterThroughAPIServer: /run_jupyter through an API
// server creates its sandbox on a node, writes the request's files and the
// driver there through the node RPC, runs the driver, answers the cells and
// fetched files it wrote, and deletes the sandbox.
func TestSandboxFusionJupyterThroughAPIServer(t *testing.T) {
	c := newFakeCluster(t, "jupyter")
	node := &jupyterNode{name: "jn1", files: map[string]map[string][]byte{}}
	c.node(t, node, node.name, []string{api.BackendContainer}, nil)
	body := `{"cells":["print(1)","x = 2"],"files":{"data/in.txt":"aGVsbG8="},"fetch_files":["data/in.txt"],"total_timeout":30}`
	var code int
	var out map[string]any
	if !testwait.Until(20*time.Second, func() bool {
		code, out = c.post(t, "/run_jupyter", body)
		return code == 200
	}) {
		t.Fatalf("/run_jupyter through the API server: %d %v", code, out)
	}
	cells, _ := out["cells"].([]any)
	if out["status"] != "Success" || len(cells) != 2 || cells[0].(map[string]any)["stdout"] != "print(1)" {
		t.Fatalf("/run_jupyter: %v", out)
	}
	if files, _ := out["files"].(map[string]any); files["data/in.txt"] != "aGVsbG8=" {
		t.Errorf("fetched files %v, want data/in.txt as written", out["files"])
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if len(node.execs) != 1 || node.execs[0].Cmd[0] != "python3" {
		t.Errorf("the node ran %+v, want the driver once", node.execs)
	}
	if len(node.deleted) != 1 || len(node.files) != 0 {
		t.Errorf("sandboxes left on the node: %d (deleted %v)", len(node.files), node.deleted)
	}
}
