package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestForkAPI forks through the API and the CLI and checks the refusals.
func TestForkAPI(t *testing.T) {
	n := startNode(t, "--max-fork", "4")
	ctx := context.Background()
	p := n.create(t, api.CreateSandboxRequest{})
	n.sh(t, p, "echo hi > /f")
	res, err := n.cl.Fork(ctx, p, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	for _, c := range res.Children {
		t.Cleanup(func() { _ = n.cl.Delete(ctx, c.ID) })
		if r := n.sh(t, c.ID, "cat /f"); r.Stdout != "hi\n" {
			t.Fatalf("child %s: %q", c.ID, r.Stdout)
		}
	}
	out, errOut, code := n.cli(t, "", "fork", p, "--count", "3")
	ids := strings.Fields(out)
	if code != 0 || len(ids) != 3 {
		t.Fatalf("dsec fork: exit %d: %q %s", code, out, errOut)
	}
	for _, id := range ids {
		t.Cleanup(func() { _ = n.cl.Delete(ctx, id) })
	}
	before, _ := n.cl.List(ctx)
	for _, count := range []int{0, 5} {
		_, err := n.cl.Fork(ctx, p, api.ForkRequest{Count: count})
		if !isCode(err, api.CodeInvalidArgument) {
			t.Fatalf("fork count %d: %v, want invalid_argument", count, err)
		}
	}
	if _, _, code := n.cli(t, "", "fork", p, "--count", "0"); code == 0 {
		t.Fatal("dsec fork --count 0 succeeded")
	}
	if after, _ := n.cl.List(ctx); len(after) != len(before) {
		t.Fatalf("refused forks changed the sandbox count: %d → %d", len(before), len(after))
	}
}

// TestCommit commits a sandbox on a directory image into an environment, a
// sandbox on that environment into a second one, and boots the second on the
// same node and on a second node (a fresh data dir) that only shares the blob
// store: deleted files stay deleted and a replaced directory stays opaque
// (against a directory lower and against an EROFS lower), excluded paths and
// caches are gone.
func TestCommit(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	a := layeredNode(t)
	ctx := context.Background()
	id := a.create(t, api.CreateSandboxRequest{Image: "busybox"})
	a.sh(t, id, `mkdir -p /app/__pycache__ /root/.cache /app/secret /data/sub && echo keep > /app/keep &&
		echo c > /app/__pycache__/m.cpython.pyc && echo p > /app/x.pyc && echo s > /app/secret/key &&
		echo junk > /tmp/junk && echo cache > /root/.cache/c && rm /bin/vi &&
		echo a > /data/a && echo b > /data/b && echo x > /data/sub/x`)
	res, err := a.cl.Commit(ctx, id, api.CommitRequest{Name: "bb-one", Exclude: []string{"/app/secret"}})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if res.Whiteouts < 1 || res.Excluded < 5 || res.Layer.Digest == "" || len(res.Image.Layers) != 2 {
		t.Fatalf("commit result %+v", res)
	}
	// The same name again, a bad name, a directory image's name: refused.
	for name, code := range map[string]api.Code{"bb-one": api.CodeAlreadyExists, "Bad Name": api.CodeInvalidArgument, "busybox": api.CodeAlreadyExists} {
		if _, err := a.cl.Commit(ctx, id, api.CommitRequest{Name: name}); !isCode(err, code) {
			t.Fatalf("commit to %q: %v, want %s", name, err, code)
		}
	}
	if _, err := a.cl.Commit(ctx, id, api.CommitRequest{Name: "bb-x", Exclude: []string{"[bad"}}); !isCode(err, api.CodeInvalidArgument) {
		t.Fatalf("bad exclude pattern: %v", err)
	}
	if _, err := a.cl.Image(ctx, "bb-x"); !isCode(err, api.CodeNotFound) {
		t.Fatalf("a refused commit left environment bb-x: %v", err)
	}

	// Second generation, on the EROFS layers of the first.
	id2 := a.create(t, api.CreateSandboxRequest{Image: "bb-one"})
	a.sh(t, id2, `rm /data/a && rm -rf /data/sub && mkdir /data/sub && echo y > /data/sub/y`)
	out, errOut, code := a.cli(t, "", "commit", id2, "--name", "bb-two")
	if code != 0 || !strings.Contains(out, `"digest"`) {
		t.Fatalf("dsec commit: exit %d: %s%s", code, out, errOut)
	}
	img, err := a.cl.Image(ctx, "bb-two")
	if err != nil || len(img.Layers) != 3 {
		t.Fatalf("bb-two: %+v %v", img, err)
	}
	check := func(n *node, what string) {
		t.Helper()
		c := n.create(t, api.CreateSandboxRequest{Image: "bb-two"})
		r := n.sh(t, c, `cat /app/keep; ls /data /data/sub; test -e /bin/vi && echo VI; test -e /bin/sh && echo sh;
			ls /app/__pycache__ /app/x.pyc /app/secret /tmp/junk /root/.cache/c 2>/dev/null; echo end`)
		if r.Stdout != "keep\n/data:\nb\nsub\n\n/data/sub:\ny\nsh\nend\n" {
			t.Fatalf("%s: sandbox on the committed environment sees %q (%s)", what, r.Stdout, r.Stderr)
		}
	}
	check(a, "same node")

	// A fork of a sandbox on the layered environment: the children hold the
	// EROFS layers too and see the parent's writes over them.
	lp := a.create(t, api.CreateSandboxRequest{Image: "bb-two"})
	a.sh(t, lp, "echo forked > /data/f && rm /data/b")
	fr, err := a.cl.Fork(ctx, lp, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("fork on a layered environment: %v", err)
	}
	for _, c := range fr.Children {
		t.Cleanup(func() { _ = a.cl.Delete(ctx, c.ID) })
		if r := a.sh(t, c.ID, "cat /data/f; ls /data; cat /app/keep"); r.Stdout != "forked\nf\nsub\nkeep\n" {
			t.Fatalf("layered fork child sees %q (%s)", r.Stdout, r.Stderr)
		}
	}

	// A second node: its own data dir, the first node's blob store.
	b := layeredNode(t, "--blob-store", "dir:"+paths.New(a.dataDir).Blobs())
	req := api.ComposeImageRequest{Name: "bb-two", Base: img.Layers[0].Digest}
	for _, l := range img.Layers[1:] {
		req.Toolkits = append(req.Toolkits, l.Digest)
	}
	if _, err := b.cl.ComposeImage(ctx, req); err != nil {
		t.Fatalf("compose on node b: %v", err)
	}
	check(b, "fresh node")
}
