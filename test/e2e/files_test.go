package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestFilesAPI(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{})
	secret, err := os.CreateTemp("/tmp", "dsec-secret-")
	if err != nil {
		t.Fatal(err)
	}
	secret.WriteString("host secret")
	secret.Close()
	defer os.Remove(secret.Name())

	t.Run("write, read, stat, list, mkdir, remove", func(t *testing.T) {
		if err := n.cl.Mkdir(ctx, id, api.MkdirRequest{Path: "/work/sub", Parents: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.cl.WriteFile(ctx, id, "/work/sub/a.txt", 0o600, strings.NewReader("alpha")); err != nil {
			t.Fatal(err)
		}
		if r := n.sh(t, id, "cat /work/sub/a.txt; stat -c %a /work/sub/a.txt"); r.Stdout != "alpha600\n" {
			t.Fatalf("inside view: %q", r.Stdout)
		}
		rc, err := n.cl.ReadFile(ctx, id, "/work/sub/a.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "alpha" {
			t.Fatalf("read %q", b)
		}
		st, err := n.cl.Stat(ctx, id, "/work/sub/a.txt")
		if err != nil || st.Size != 5 || st.Type != "file" || st.Mode != 0o600 {
			t.Fatalf("stat %+v %v", st, err)
		}
		ls, err := n.cl.ListFiles(ctx, id, "/work/sub")
		if err != nil || len(ls) != 1 || ls[0].Name != "a.txt" {
			t.Fatalf("list %+v %v", ls, err)
		}
		if err := n.cl.Remove(ctx, id, "/work", true); err != nil {
			t.Fatal(err)
		}
		if _, err := n.cl.Stat(ctx, id, "/work"); !isCode(err, api.CodeNotFound) {
			t.Fatalf("after remove: %v", err)
		}
	})
	t.Run("traversal and symlink escapes stay inside the sandbox", func(t *testing.T) {
		n.sh(t, id, "ln -s "+secret.Name()+" /root/abs-link; ln -s ../../../../../../.. /root/up-link; ln -s /proc/1/root /root/magic")
		for _, p := range []string{
			"/../../../../" + secret.Name(),
			"../../../.." + secret.Name(),
			"/root/abs-link",
			"/root/up-link" + secret.Name(),
			"/root/magic" + secret.Name(),
		} {
			rc, err := n.cl.ReadFile(ctx, id, p)
			if err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				if bytes.Contains(b, []byte("host secret")) {
					t.Fatalf("read host file through %q", p)
				}
			}
		}
		// Writing through a symlink that points at a host path must not touch the host.
		n.sh(t, id, "ln -s /tmp/dsec-e2e-escape /root/w-link")
		os.Remove("/tmp/dsec-e2e-escape")
		_, _ = n.cl.WriteFile(ctx, id, "/root/w-link", 0o644, strings.NewReader("pwned"))
		if _, err := os.Stat("/tmp/dsec-e2e-escape"); err == nil {
			os.Remove("/tmp/dsec-e2e-escape")
			t.Fatal("write through a symlink escaped to the host")
		}
		// A tar with climbing names must not land outside.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, name := range []string{"../../../../tmp/dsec-e2e-tar-escape", "ok.txt"} {
			tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
			tw.Write([]byte("hi"))
		}
		tw.Close()
		_ = n.cl.UploadTar(ctx, id, "/root/up", &buf)
		if _, err := os.Stat("/tmp/dsec-e2e-tar-escape"); err == nil {
			os.Remove("/tmp/dsec-e2e-tar-escape")
			t.Fatal("tar upload escaped to the host")
		}
	})
	t.Run("tar round trip", func(t *testing.T) {
		n.sh(t, id, "mkdir -p /data/d && echo one > /data/d/1 && ln -s 1 /data/d/l")
		rc, err := n.cl.DownloadTar(ctx, id, "/data")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if err := n.cl.UploadTar(ctx, id, "/copy", bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		if r := n.sh(t, id, "cat /copy/data/d/1 && readlink /copy/data/d/l"); r.Stdout != "one\n1\n" {
			t.Fatalf("round trip: %q %q", r.Stdout, r.Stderr)
		}
	})
	t.Run("errors", func(t *testing.T) {
		if _, err := n.cl.ReadFile(ctx, id, "/nope"); !isCode(err, api.CodeNotFound) {
			t.Fatalf("missing file: %v", err)
		}
		if err := n.cl.Remove(ctx, id, "/", true); !isCode(err, api.CodeInvalidArgument) {
			t.Fatalf("remove /: %v", err)
		}
		if r := n.sh(t, id, "ls /bin/sh"); r.ExitCode != 0 {
			t.Fatal("sandbox damaged by refused requests")
		}
	})
}

func isCode(err error, code api.Code) bool {
	ae, ok := api.AsError(err)
	return ok && ae.Code == code
}
