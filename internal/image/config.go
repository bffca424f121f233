package image

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Config is an image's process defaults, as Docker keeps them from an image
// config: Env is the base environment of every exec (PATH from the image
// replaces dsec's default PATH), WorkingDir the default cwd, User the default
// user; a request's env, cwd and user override them (see ExecEnv, ExecUser,
// ExecCwd). Entrypoint, Cmd, ExposedPorts and Labels are recorded and shown,
// not run.
type Config api.ImageConfig

// API returns c as the API shows it (nil stays nil).
func (c *Config) API() *api.ImageConfig { return (*api.ImageConfig)(c) }

// IsZero reports whether c sets nothing.
func (c *Config) IsZero() bool {
	return c == nil || len(c.Env) == 0 && c.WorkingDir == "" && c.User == "" && len(c.Entrypoint) == 0 && len(c.Cmd) == 0 &&
		len(c.ExposedPorts) == 0 && len(c.Labels) == 0
}

// Validate checks a config read from outside (an OCI image, image.json).
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return errdefs.Invalid("image config: env entry %q is not KEY=VALUE", kv)
		}
	}
	if c.WorkingDir != "" && (!path.IsAbs(c.WorkingDir) || strings.IndexByte(c.WorkingDir, 0) >= 0) {
		return errdefs.Invalid("image config: working_dir %q is not an absolute path", c.WorkingDir)
	}
	if strings.IndexByte(c.User, 0) >= 0 || strings.ContainsAny(c.User, " \n") {
		return errdefs.Invalid("image config: invalid user %q", c.User)
	}
	for _, a := range append(append([]string(nil), c.Entrypoint...), c.Cmd...) {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("image config: entrypoint and cmd must not contain NUL bytes")
		}
	}
	return nil
}

// Merge returns upper's config over lower's, as a child image's config over its
// parent's: Env merges by key (upper wins, lower's order kept, new keys after),
// WorkingDir and User are upper's where it sets them, and an upper Entrypoint
// replaces both Entrypoint and Cmd (like a Dockerfile ENTRYPOINT, it resets an
// inherited CMD) while an upper Cmd alone replaces Cmd. nil means none; the
// result is nil when both are.
func Merge(lower, upper *Config) *Config {
	if upper.IsZero() {
		return clone(lower)
	}
	if lower.IsZero() {
		return clone(upper)
	}
	out := clone(lower)
	out.Env = mergeEnv(out.Env, upper.Env)
	if upper.WorkingDir != "" {
		out.WorkingDir = upper.WorkingDir
	}
	if upper.User != "" {
		out.User = upper.User
	}
	switch {
	case len(upper.Entrypoint) > 0:
		out.Entrypoint = append([]string(nil), upper.Entrypoint...)
		out.Cmd = append([]string(nil), upper.Cmd...)
	case len(upper.Cmd) > 0:
		out.Cmd = append([]string(nil), upper.Cmd...)
	}
	for _, p := range upper.ExposedPorts {
		if !slices.Contains(out.ExposedPorts, p) {
			out.ExposedPorts = append(out.ExposedPorts, p)
		}
	}
	if len(upper.Labels) > 0 && out.Labels == nil {
		out.Labels = map[string]string{}
	}
	maps.Copy(out.Labels, upper.Labels)
	return out
}

func clone(c *Config) *Config {
	if c.IsZero() {
		return nil
	}
	return &Config{Env: append([]string(nil), c.Env...), WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: append([]string(nil), c.Entrypoint...), Cmd: append([]string(nil), c.Cmd...),
		ExposedPorts: slices.Clone(c.ExposedPorts), Labels: maps.Clone(c.Labels)}
}

func mergeEnv(lower, upper []string) []string {
	out := append([]string(nil), lower...)
	at := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		at[k] = i
	}
	for _, kv := range upper {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// ExecEnv applies c's Env over env (dsec's defaults for an exec: PATH, HOME,
// ...). The sandbox's and the request's env are applied after it by the caller.
func (c *Config) ExecEnv(env map[string]string) {
	if c == nil {
		return
	}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
}

// ExecUser is the user an exec runs as: the request's, else the image's ("" =
// root).
func (c *Config) ExecUser(req string) string {
	if req != "" || c == nil {
		return req
	}
	return c.User
}

// ExecCwd is an exec's working directory: the request's, else the image's
// WorkingDir, else home (the user's home directory).
func (c *Config) ExecCwd(req, home string) string {
	switch {
	case req != "":
		return req
	case c != nil && c.WorkingDir != "":
		return c.WorkingDir
	}
	return home
}
