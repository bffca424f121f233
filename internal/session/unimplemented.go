package session

import (
	"context"
	"io"
	"net"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Unimplemented answers every method of Service with a not_implemented error
// (gRPC's Unimplemented*Server pattern). An implementation that serves only
// some method groups embeds it and defines the rest; a front end maps
// not_implemented to its wire error (501 on /v1) and never probes with a type
// assertion.
type Unimplemented struct{}

var _ Service = Unimplemented{}

// NotImplemented is the error Unimplemented answers for method.
func NotImplemented(method string) error {
	return errdefs.New(api.CodeNotImplemented, "this service does not implement %s", method)
}

func (Unimplemented) Info(context.Context) (api.Info, error) {
	return api.Info{}, NotImplemented("Info")
}
func (Unimplemented) Create(context.Context, api.CreateSandboxRequest) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("Create")
}
func (Unimplemented) CreateBatch(context.Context, []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	return nil, NotImplemented("CreateBatch")
}
func (Unimplemented) Get(context.Context, string) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("Get")
}
func (Unimplemented) List(context.Context) ([]api.Sandbox, error) {
	return nil, NotImplemented("List")
}
func (Unimplemented) Delete(context.Context, string) error { return NotImplemented("Delete") }
func (Unimplemented) Pause(context.Context, string) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("Pause")
}
func (Unimplemented) Resume(context.Context, string) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("Resume")
}
func (Unimplemented) Reset(context.Context, string) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("Reset")
}
func (Unimplemented) Fork(context.Context, string, api.ForkRequest) (api.ForkResult, error) {
	return api.ForkResult{}, NotImplemented("Fork")
}
func (Unimplemented) Commit(context.Context, string, api.CommitRequest) (api.CommitResult, error) {
	return api.CommitResult{}, NotImplemented("Commit")
}

func (Unimplemented) Exec(context.Context, string, api.ExecRequest) (api.ExecResult, error) {
	return api.ExecResult{}, NotImplemented("Exec")
}
func (Unimplemented) ExecStream(context.Context, string, api.ExecRequest, Stream) (api.ExecResult, error) {
	return api.ExecResult{}, NotImplemented("ExecStream")
}
func (Unimplemented) StartProcess(context.Context, string, api.ExecRequest) (api.Process, error) {
	return api.Process{}, NotImplemented("StartProcess")
}
func (Unimplemented) ListProcesses(context.Context, string) ([]api.Process, error) {
	return nil, NotImplemented("ListProcesses")
}
func (Unimplemented) GetProcess(context.Context, string, string) (api.Process, error) {
	return api.Process{}, NotImplemented("GetProcess")
}
func (Unimplemented) WaitProcess(context.Context, string, string) (api.Process, error) {
	return api.Process{}, NotImplemented("WaitProcess")
}
func (Unimplemented) SendProcessInput(context.Context, string, string, api.ProcessInput) error {
	return NotImplemented("process input")
}
func (Unimplemented) KillProcess(context.Context, string, string, int) error {
	return NotImplemented("KillProcess")
}
func (Unimplemented) ProcessLogs(context.Context, string, string, string, int64) (io.ReadCloser, error) {
	return nil, NotImplemented("ProcessLogs")
}
func (Unimplemented) FollowProcess(context.Context, string, string, api.FollowRequest) (api.ProcessOutput, error) {
	return api.ProcessOutput{}, NotImplemented("FollowProcess")
}

func (Unimplemented) FS(context.Context, string) (FS, error) { return nil, NotImplemented("FS") }
func (Unimplemented) Dial(context.Context, string, int) (net.Conn, error) {
	return nil, NotImplemented("Dial")
}

func (Unimplemented) CreateWatch(context.Context, string, api.WatchRequest) (api.Watch, error) {
	return api.Watch{}, NotImplemented("directory watches")
}
func (Unimplemented) WatchEvents(context.Context, string, string) ([]api.WatchEvent, error) {
	return nil, NotImplemented("directory watches")
}
func (Unimplemented) RemoveWatch(context.Context, string, string) error {
	return NotImplemented("directory watches")
}

func (Unimplemented) SetNetwork(context.Context, string, api.NetworkPolicy) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("network policies")
}
func (Unimplemented) PauseWith(context.Context, string, api.PauseRequest) (api.PauseResponse, error) {
	return api.PauseResponse{}, NotImplemented("pause with reclaim")
}
func (Unimplemented) SetDeadline(context.Context, string, api.DeadlineRequest) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("deadlines")
}
func (Unimplemented) SetCPUClass(context.Context, string, string) (api.Sandbox, error) {
	return api.Sandbox{}, NotImplemented("CPU classes")
}
func (Unimplemented) SandboxUsage(context.Context, []string) ([]api.SandboxUsage, error) {
	return nil, NotImplemented("sandbox usage")
}
func (Unimplemented) UsageHistory(context.Context, string, api.UsageHistoryRequest) ([]api.UsageSample, error) {
	return nil, NotImplemented("usage history")
}

func (Unimplemented) Screenshot(context.Context, string) ([]byte, error) {
	return nil, NotImplemented("screenshots")
}
func (Unimplemented) SendInput(context.Context, string, api.InputRequest) (api.InputResult, error) {
	return api.InputResult{}, NotImplemented("input")
}

func (Unimplemented) HTTP(context.Context, string, int, HTTPRequest) (HTTPResponse, error) {
	return HTTPResponse{}, NotImplemented("HTTP requests as trajectory steps")
}

func (Unimplemented) FnCall(context.Context, api.FnCallRequest) (api.FnCallResult, error) {
	return api.FnCallResult{}, NotImplemented("FnCall")
}

func (Unimplemented) Images(context.Context) ([]api.Image, error) {
	return nil, NotImplemented("images")
}
func (Unimplemented) Image(context.Context, string) (api.Image, error) {
	return api.Image{}, NotImplemented("images")
}
func (Unimplemented) Compose(context.Context, api.ComposeImageRequest) (api.Image, error) {
	return api.Image{}, NotImplemented("composing environments")
}
func (Unimplemented) RemoveImage(context.Context, string) error {
	return NotImplemented("removing environments")
}
func (Unimplemented) RecordImage(context.Context, string) ([]api.RecordedLayer, error) {
	return nil, NotImplemented("prefetch recording")
}
func (Unimplemented) ImagePulls(context.Context, string) ([]api.PullProgress, error) {
	return nil, NotImplemented("image pulls in flight")
}
func (Unimplemented) BuildImage(context.Context, api.BuildImageRequest, io.Reader) (api.BuildImageResult, error) {
	return api.BuildImageResult{}, NotImplemented("Dockerfile builds")
}
func (Unimplemented) PruneBuildCache(context.Context) (api.BuildCachePruned, error) {
	return api.BuildCachePruned{}, NotImplemented("Dockerfile builds")
}

func (Unimplemented) ListTrajectories(context.Context) ([]api.Trajectory, error) {
	return nil, NotImplemented("trajectories")
}
func (Unimplemented) GetTrajectory(context.Context, string) (api.Trajectory, error) {
	return api.Trajectory{}, NotImplemented("trajectories")
}
func (Unimplemented) DeleteTrajectory(context.Context, string) error {
	return NotImplemented("trajectories")
}
func (Unimplemented) RebuildTrajectory(context.Context, string) (api.RebuildResponse, error) {
	return api.RebuildResponse{}, NotImplemented("trajectories")
}

func (Unimplemented) ListNodes(context.Context) ([]api.Node, error) {
	return nil, NotImplemented("nodes (a cluster's API server lists them)")
}
func (Unimplemented) SetDrain(context.Context, string, bool) error {
	return NotImplemented("nodes (a cluster's API server drains them)")
}
func (Unimplemented) RemoveNode(context.Context, string) (api.RemoveNodeResponse, error) {
	return api.RemoveNodeResponse{}, NotImplemented("nodes (a cluster's API server removes them)")
}

func (Unimplemented) CreateProject(context.Context, api.CreateProjectRequest) (api.ProjectTokenResponse, error) {
	return api.ProjectTokenResponse{}, NotImplemented("projects")
}
func (Unimplemented) ListProjects(context.Context) ([]api.Project, error) {
	return nil, NotImplemented("projects")
}
func (Unimplemented) GetProject(context.Context, string) (api.Project, error) {
	return api.Project{}, NotImplemented("projects")
}
func (Unimplemented) DeleteProject(context.Context, string) error {
	return NotImplemented("projects")
}
func (Unimplemented) SetQuota(context.Context, string, api.Quota) (api.Project, error) {
	return api.Project{}, NotImplemented("projects")
}
func (Unimplemented) AddToken(context.Context, string) (api.ProjectTokenResponse, error) {
	return api.ProjectTokenResponse{}, NotImplemented("projects")
}
func (Unimplemented) RemoveToken(context.Context, string, string) error {
	return NotImplemented("projects")
}
func (Unimplemented) SetRegistryAuth(context.Context, string, string, api.RegistryAuth) (api.Project, error) {
	return api.Project{}, NotImplemented("projects")
}
func (Unimplemented) RemoveRegistryAuth(context.Context, string, string) error {
	return NotImplemented("projects")
}
