package project

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The project administration behind /v1/projects (session.Projects): only
// tokens of the default project may use it.

func admin(ctx context.Context) error {
	if p := caller(ctx); p != Default {
		return errdefs.New(api.CodePermissionDenied, "project administration needs a token of the %q project; this token is project %q's", Default, p)
	}
	return nil
}

// Identify implements server.ProjectAuth.
func (g *Guard) Identify(tok string) (string, bool) { return g.store.Identify(tok) }

func (g *Guard) tokenResponse(ctx context.Context, name, tok string) (api.ProjectTokenResponse, error) {
	in, err := g.store.Get(ctx, name)
	if err != nil {
		return api.ProjectTokenResponse{}, err
	}
	return api.ProjectTokenResponse{Project: in.ToAPI(), Token: tok, TokenID: TokenID(Digest(tok))}, nil
}

func (g *Guard) CreateProject(ctx context.Context, req api.CreateProjectRequest) (api.ProjectTokenResponse, error) {
	if err := admin(ctx); err != nil {
		return api.ProjectTokenResponse{}, err
	}
	if err := checkAPIQuota(req.Quota); err != nil {
		return api.ProjectTokenResponse{}, err
	}
	tok, err := g.store.Create(ctx, req.Name, QuotaFromAPI(req.Quota))
	if err != nil {
		return api.ProjectTokenResponse{}, err
	}
	return g.tokenResponse(ctx, req.Name, tok)
}

func (g *Guard) ListProjects(ctx context.Context) ([]api.Project, error) {
	if err := admin(ctx); err != nil {
		return nil, err
	}
	infos, err := g.store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Project, len(infos))
	for i, in := range infos {
		out[i] = in.ToAPI()
	}
	return out, nil
}

func (g *Guard) GetProject(ctx context.Context, name string) (api.Project, error) {
	if err := admin(ctx); err != nil {
		return api.Project{}, err
	}
	in, err := g.store.Get(ctx, name)
	return in.ToAPI(), err
}

// DeleteProject refuses while any node reports a sandbox of the project.
func (g *Guard) DeleteProject(ctx context.Context, name string) error {
	if err := admin(ctx); err != nil {
		return err
	}
	all, err := g.Service.List(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, sb := range all {
		if ownerOf(sb).project == name {
			n++
		}
	}
	if n > 0 {
		return errdefs.Conflict("project %q still has %d sandboxes; delete them first", name, n)
	}
	return g.store.Delete(ctx, name)
}

// SetQuota sets a project's quota and reconciles it at once, so its live
// sandboxes count from now on.
func (g *Guard) SetQuota(ctx context.Context, name string, q api.Quota) (api.Project, error) {
	if err := admin(ctx); err != nil {
		return api.Project{}, err
	}
	if err := checkAPIQuota(q); err != nil {
		return api.Project{}, err
	}
	if err := g.store.SetQuota(ctx, name, QuotaFromAPI(q)); err != nil {
		return api.Project{}, err
	}
	if err := g.ReconcileProject(ctx, name); err != nil {
		g.log.Warn("reconciling a project after set-quota failed; the next round will", "project", name, "err", err)
	}
	in, err := g.store.Get(ctx, name)
	return in.ToAPI(), err
}

func (g *Guard) AddToken(ctx context.Context, name string) (api.ProjectTokenResponse, error) {
	if err := admin(ctx); err != nil {
		return api.ProjectTokenResponse{}, err
	}
	tok, err := g.store.AddToken(ctx, name)
	if err != nil {
		return api.ProjectTokenResponse{}, err
	}
	return g.tokenResponse(ctx, name, tok)
}

func (g *Guard) RemoveToken(ctx context.Context, name, id string) error {
	if err := admin(ctx); err != nil {
		return err
	}
	if len(id) < 6 {
		return errdefs.Invalid("token id %q: give at least 6 hex digits of the id `dsec project ls` shows", id)
	}
	return g.store.RemoveToken(ctx, name, id)
}

// SetRegistryAuth stores project name's credentials for registry host; the
// answer (and the log) shows the host only.
func (g *Guard) SetRegistryAuth(ctx context.Context, name, host string, a api.RegistryAuth) (api.Project, error) {
	if err := admin(ctx); err != nil {
		return api.Project{}, err
	}
	if err := g.store.SetRegistryAuth(ctx, name, host, a); err != nil {
		return api.Project{}, err
	}
	g.log.Info("project registry credentials set", "project", name, "registry", RegistryHost(host))
	in, err := g.store.Get(ctx, name)
	return in.ToAPI(), err
}

func (g *Guard) RemoveRegistryAuth(ctx context.Context, name, host string) error {
	if err := admin(ctx); err != nil {
		return err
	}
	if err := g.store.RemoveRegistryAuth(ctx, name, host); err != nil {
		return err
	}
	g.log.Info("project registry credentials removed", "project", name, "registry", RegistryHost(host))
	return nil
}

func checkAPIQuota(q api.Quota) error {
	if q.MaxSandboxes < 0 || q.CPU < 0 || q.MemoryBytes < 0 || q.CPU != q.CPU {
		return errdefs.Invalid("quota: max_sandboxes, cpu and memory_bytes are 0 (unlimited) or positive")
	}
	return nil
}
