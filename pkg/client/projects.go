package client

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Project administration (/v1/projects): a token of the default project only.

// Projects lists the projects.
func (c *Client) Projects(ctx context.Context) ([]api.Project, error) {
	var out api.ListProjectsResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/projects", retry: true}, &out)
	return out.Projects, err
}

// Project returns one project.
func (c *Client) Project(ctx context.Context, name string) (api.Project, error) {
	var out api.Project
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/projects/" + esc(name), retry: true}, &out)
	return out, err
}

// CreateProject creates a project with one token, returned this once.
func (c *Client) CreateProject(ctx context.Context, name string, q api.Quota) (api.ProjectTokenResponse, error) {
	var out api.ProjectTokenResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/projects", json: api.CreateProjectRequest{Name: name, Quota: q}}, &out)
	return out, err
}

// DeleteProject removes a project without sandboxes and its tokens.
func (c *Client) DeleteProject(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/projects/" + esc(name), retry: true}, nil)
}

// SetQuota replaces a project's quota (zero fields: unlimited).
func (c *Client) SetQuota(ctx context.Context, name string, q api.Quota) (api.Project, error) {
	var out api.Project
	err := c.do(ctx, call{method: http.MethodPut, path: "/v1/projects/" + esc(name) + "/quota", json: q, retry: true}, &out)
	return out, err
}

// AddProjectToken adds a token to a project, returned this once.
func (c *Client) AddProjectToken(ctx context.Context, name string) (api.ProjectTokenResponse, error) {
	var out api.ProjectTokenResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/projects/" + esc(name) + "/tokens"}, &out)
	return out, err
}

// RemoveProjectToken removes the token whose ID (or an ID prefix of at least 6
// hex digits) is id.
func (c *Client) RemoveProjectToken(ctx context.Context, name, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/projects/" + esc(name) + "/tokens/" + esc(id), retry: true}, nil)
}

// SetProjectRegistryAuth stores a project's credentials for registry host
// (HOST[:PORT]; docker.io for Docker Hub): creates by the project's tokens
// fetch images from that registry with them. The answer lists the hosts only.
func (c *Client) SetProjectRegistryAuth(ctx context.Context, name, host string, a api.RegistryAuth) (api.Project, error) {
	var out api.Project
	err := c.do(ctx, call{method: http.MethodPut, path: "/v1/projects/" + esc(name) + "/registries/" + esc(host), json: a, retry: true}, &out)
	return out, err
}

// RemoveProjectRegistryAuth removes a project's credentials for registry host.
func (c *Client) RemoveProjectRegistryAuth(ctx context.Context, name, host string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/projects/" + esc(name) + "/registries/" + esc(host), retry: true}, nil)
}
