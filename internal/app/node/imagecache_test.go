package node

import (
	"context"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestImageCacheKeepsWhatSandboxesUse: on a node with an image cache budget,
// removing an image a sandbox runs on is refused (naming the sandbox),
// eviction after a pull over the budget takes the least recently used image
// no sandbox uses and never the one in use, a create of an evicted image
// pulls it again, and once the sandbox is gone its image can be removed.
func TestImageCacheKeepsWhatSandboxesUse(t *testing.T) {
	d, reg := pullNode(t)
	d.puller.Grace = 0 // the test's creates register their sandboxes before the next pull
	ctx := context.Background()
	bb := busyboxLayer(t)
	tops := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		l := registrytest.Layer(t, regEntry{Name: "which", Body: n + strings.Repeat(" ", 64<<10)})
		dg, _ := l.Digest()
		tops[n] = dg.String()
		reg.Push(t, "cache/"+n+":1", registrytest.Image(t, v1.Config{}, bb, l))
	}
	ref := func(n string) string { return reg.Host + "/cache/" + n + ":1" }

	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: ref("a")})
	if err != nil {
		t.Fatal(err)
	}
	err = d.node.RemoveImage(ctx, ref("a"))
	if errdefs.CodeOf(err) != api.CodeConflict || !strings.Contains(err.Error(), sb.ID) {
		t.Fatalf("removing the image of %s: %v, want conflict naming it", sb.ID, err)
	}
	if _, err := d.Manager.Image(ctx, ref("b")); err != nil { // dsec image pull
		t.Fatal(err)
	}
	two, err := d.puller.CacheBytes()
	if err != nil {
		t.Fatal(err)
	}
	d.puller.Budget = two
	// a is the oldest but in use: b goes.
	if _, err := d.Manager.Image(ctx, ref("c")); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	imgs, _ := d.puller.Cached()
	for _, c := range imgs {
		for _, r := range c.Refs {
			names[r] = true
		}
	}
	if !names[ref("a")] || names[ref("b")] || !names[ref("c")] {
		t.Fatalf("cache after c: %v; want a (in use) and c", names)
	}
	if out, _ := sh(t, d, sb.ID, "cat /which | tr -d ' '"); out != "a" {
		t.Fatalf("the sandbox on a reads %q after the eviction", out)
	}
	// A create of the evicted image pulls it again.
	gets := reg.BlobGets()[tops["b"]]
	sbB, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: ref("b")})
	if err != nil {
		t.Fatalf("create of an evicted image: %v", err)
	}
	if n := reg.BlobGets()[tops["b"]]; n != gets+1 {
		t.Fatalf("b's layer fetched %d → %d times", gets, n)
	}
	if out, _ := sh(t, d, sbB.ID, "cat /which | tr -d ' '"); out != "b" {
		t.Fatalf("the new sandbox on b reads %q", out)
	}
	// The sandbox gone, its image goes.
	if err := d.Manager.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.node.RemoveImage(ctx, ref("a")); err != nil {
		t.Fatalf("removing a after its sandbox: %v", err)
	}
	if _, err := d.Manager.Image(ctx, ref("a")); err != nil {
		t.Fatalf("pull after removal: %v", err)
	}
}
