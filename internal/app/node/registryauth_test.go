package node

import (
	"context"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestCreateWithRegistryAuth: a node without credentials of its own for a
// private registry creates from it with a create's registry_auth; creates
// without them, or with wrong ones, are refused permission_denied by tag
// and by digest, even though the node holds the image by then; a fork of
// the sandbox needs none.
func TestCreateWithRegistryAuth(t *testing.T) {
	d, reg := pullNodeWith(t, func(_ *registrytest.Registry, c *registry.Config) { c.DockerConfig = "" })
	ctx := context.Background()
	dg := reg.Push(t, "private/task:1", registrytest.Image(t, v1.Config{}, busyboxLayer(t),
		registrytest.Layer(t, regEntry{Name: "data/answer", Body: "42"})))
	tag, pinned := reg.Host+"/private/task:1", reg.Host+"/private/task@"+dg
	good := map[string]api.RegistryAuth{reg.Host: {Username: "alice", Password: "s3cret"}}
	bad := map[string]api.RegistryAuth{reg.Host: {Username: "alice", Password: "wrong"}}

	refused := func(what string, req api.CreateSandboxRequest) {
		t.Helper()
		sb, err := d.Manager.Create(ctx, req)
		if err == nil {
			t.Errorf("%s: created %s, want permission_denied", what, sb.ID)
			return
		}
		if code := errdefs.CodeOf(err); code != api.CodePermissionDenied {
			t.Errorf("%s: %v (code %s), want permission_denied", what, err, code)
		}
	}
	refused("by tag without credentials", api.CreateSandboxRequest{Image: tag})
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: tag, RegistryAuth: good})
	if err != nil {
		t.Fatalf("by tag with registry_auth: %v", err)
	}
	if out, code := sh(t, d, sb.ID, "cat /data/answer"); out != "42" || code != 0 || sb.ImageDigest != dg {
		t.Fatalf("sandbox from the private image: %q (exit %d), digest %s", out, code, sb.ImageDigest)
	}
	// The node has the image now: still refused without the credentials.
	refused("by tag without credentials, image on the node", api.CreateSandboxRequest{Image: tag})
	refused("by digest without credentials, image on the node", api.CreateSandboxRequest{Image: pinned})
	refused("by digest with a wrong password", api.CreateSandboxRequest{Image: pinned, RegistryAuth: bad})
	again, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: pinned, RegistryAuth: good})
	if err != nil {
		t.Fatalf("by digest with registry_auth: %v", err)
	}
	if out, _ := sh(t, d, again.ID, "cat /data/answer"); out != "42" {
		t.Fatalf("by digest: %q", out)
	}
	fr, err := d.Manager.Fork(ctx, sb.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork of a sandbox of the private image: %v", err)
	}
	if out, _ := sh(t, d, fr.Children[0].ID, "cat /data/answer"); out != "42" {
		t.Fatalf("fork child: %q", out)
	}
	// Malformed credentials are the request's mistake.
	for _, ra := range []map[string]api.RegistryAuth{
		{"": {Username: "a", Password: "b"}},
		{reg.Host: {Username: "", Password: "b"}},
		{reg.Host: {Username: "a"}},
		{"http://" + reg.Host: {Username: "a", Password: "b"}},
	} {
		req := api.CreateSandboxRequest{Image: tag, RegistryAuth: ra}
		if err := req.Validate(); errdefs.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("registry_auth %v: Validate %v, want invalid_argument", ra, err)
		}
	}
}
