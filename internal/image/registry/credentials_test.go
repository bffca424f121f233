package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Credentials carried by a call's context open the registry they name, for
// that call only: the client itself (no Docker config) stays anonymous, and
// credentials for another registry are not sent.
func TestCallCredentials(t *testing.T) {
	reg := registrytest.Start(t, "dora", "per-call-pw")
	reg.Push(t, "p/app:1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.Entry{Name: "f", Body: "x"})))
	c, err := registry.New(registry.Config{Insecure: []string{reg.Host}, Retries: 1, MinBackoff: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := registry.Parse(reg.Host + "/p/app:1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := registry.Credentials{Username: "dora", Password: "per-call-pw"}
	for what, c2 := range map[string]context.Context{
		"none":             ctx,
		"wrong password":   registry.WithCredentials(ctx, reg.Host, registry.Credentials{Username: "dora", Password: "nope"}),
		"another registry": registry.WithCredentials(ctx, "other.example", good),
	} {
		if _, err := c.Resolve(c2, ref); !errdefs.Is(err, api.CodePermissionDenied) {
			t.Errorf("%s: %v, want permission_denied", what, err)
		}
	}
	res, err := c.Resolve(registry.WithCredentials(ctx, reg.Host, good), ref)
	if err != nil {
		t.Fatalf("with the registry's credentials: %v", err)
	}
	ls, err := res.Image.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers %v %v", ls, err)
	}
	dg, _ := ls[0].Digest()
	if _, err := res.Source.Layer(ctx, dg); err != nil {
		t.Errorf("a layer read under the resolve's session: %v", err)
	}
	if _, err := c.Resolve(ctx, ref); !errdefs.Is(err, api.CodePermissionDenied) {
		t.Errorf("after a call with credentials, one without: %v, want permission_denied", err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", good, good, good, good); strings.Contains(s, good.Password) {
		t.Errorf("printing credentials shows the password: %s", s)
	}
}
