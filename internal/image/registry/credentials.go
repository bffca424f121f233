package registry

import (
	"context"
	"log/slog"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Credentials are a user name and password for one registry, given with a
// call (an E2B template's fromImage) rather than by the node's Docker
// config.json. They are used for that call's requests to that registry only:
// never written anywhere, and never shown by String or a log.
type Credentials struct {
	Username string
	Password string
}

// String names the user only.
func (c Credentials) String() string { return "registry credentials for " + c.Username }

// GoString is String, so %#v shows no password either.
func (c Credentials) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: the user, never the password.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

type credentialsKey struct{}

// callCredentials are the credentials a context carries, by registry host
// (hostOf's form).
type callCredentials map[string]Credentials

// WithCredentials returns ctx carrying c for registry host (HOST[:PORT], as
// a reference names it; docker.io for Docker Hub): a Resolve under it
// authenticates to that registry with c instead of the node's credentials.
// Mirrors of the registry are not sent c.
func WithCredentials(ctx context.Context, host string, c Credentials) context.Context {
	prev, _ := ctx.Value(credentialsKey{}).(callCredentials)
	next := make(callCredentials, len(prev)+1)
	for h, pc := range prev {
		next[h] = pc
	}
	next[hostOf(host)] = c
	return context.WithValue(ctx, credentialsKey{}, next)
}

// HasCredentials says whether ctx carries credentials for ref's registry.
func HasCredentials(ctx context.Context, ref name.Reference) bool {
	_, ok := credentialsFor(ctx, ref.Context().RegistryStr())
	return ok
}

func credentialsFor(ctx context.Context, host string) (Credentials, bool) {
	cc, _ := ctx.Value(credentialsKey{}).(callCredentials)
	c, ok := cc[hostOf(host)]
	return c, ok
}

// authFor is the authenticator for ep when resolving ref under ctx: the
// call's credentials at ref's own registry, else the node's keychain.
func (c *Client) authFor(ctx context.Context, ref name.Reference, ep endpoint) authn.Keychain {
	if hostOf(ep.host) == hostOf(ref.Context().RegistryStr()) {
		if cr, ok := credentialsFor(ctx, ep.host); ok {
			return staticKeychain{authn.FromConfig(authn.AuthConfig{Username: cr.Username, Password: cr.Password})}
		}
	}
	return c.keys
}

// staticKeychain answers one authenticator for any registry.
type staticKeychain struct{ a authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.a, nil }

// WithAuth is WithCredentials for each registry host of auth (a request's
// registry_auth).
func WithAuth(ctx context.Context, auth map[string]api.RegistryAuth) context.Context {
	for host, a := range auth {
		ctx = WithCredentials(ctx, host, Credentials{Username: a.Username, Password: a.Password})
	}
	return ctx
}

type accessCheckedKey struct{}

// WithAccessChecked marks ctx's pulls as made for a sandbox whose access to
// the image was checked already (a fork of a sandbox running it): a node's
// copy of an image fetched with other credentials answers without asking
// the registry again.
func WithAccessChecked(ctx context.Context) context.Context {
	return context.WithValue(ctx, accessCheckedKey{}, true)
}

// AccessChecked reports WithAccessChecked.
func AccessChecked(ctx context.Context) bool {
	v, _ := ctx.Value(accessCheckedKey{}).(bool)
	return v
}
