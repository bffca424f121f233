package v1_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestFiles(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID + "/files"

	resp, b := e.do("PUT", base+"?path=/hello.txt&mode=0600", strings.NewReader("hi there"))
	var info api.FileInfo
	mustJSON(t, b, &info)
	if resp.StatusCode != 200 || info.Size != 8 || info.Mode != 0o600 {
		t.Fatalf("write: %d %s", resp.StatusCode, b)
	}
	if got, err := os.ReadFile(filepath.Join(e.node.Root(sb.ID), "hello.txt")); err != nil || string(got) != "hi there" {
		t.Fatalf("on disk: %q %v", got, err)
	}
	resp, b = e.do("GET", base+"?path=/hello.txt", nil)
	if resp.StatusCode != 200 || string(b) != "hi there" || resp.Header.Get(v1.ModeHeader) != "0600" ||
		resp.ContentLength != 8 {
		t.Fatalf("read: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	resp, _ = e.do("POST", base+"/mkdir", strings.NewReader(`{"path":"/a/b","parents":true}`))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("mkdir: %d", resp.StatusCode)
	}
	_, b = e.do("GET", base+"/list?path=/", nil)
	var list api.ListFilesResponse
	mustJSON(t, b, &list)
	// The listing is the sandbox's root (the image's directories too), sorted.
	ents, err := os.ReadDir(e.node.Root(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, ent := range ents {
		want = append(want, ent.Name())
	}
	for _, f := range list.Files {
		got = append(got, f.Name)
	}
	if !slices.Equal(got, want) || !slices.Contains(got, "a") || !slices.Contains(got, "hello.txt") {
		t.Fatalf("list: %s, want %v", b, want)
	}
	_, b = e.do("GET", base+"/stat?path=/a", nil)
	mustJSON(t, b, &info)
	if info.Type != "dir" {
		t.Fatalf("stat: %s", b)
	}
	resp, b = e.do("GET", base+"?path=/missing", nil)
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	resp, _ = e.do("DELETE", base+"?path=/a&recursive=true", nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("remove: %d", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(e.node.Root(sb.ID), "a")); !os.IsNotExist(err) {
		t.Fatalf("a still there: %v", err)
	}
	// Chunked upload over the limit: caught while streaming.
	small := newEnv(t, v1.Options{MaxUploadBytes: 4})
	sb = small.create()
	resp, b = small.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/big", &chunked{strings.NewReader("0123456789")})
	wantError(t, resp, b, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
}

// chunked hides the reader's length so the request is sent without Content-Length.
type chunked struct{ r *strings.Reader }

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestArchive(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID + "/files"
	if err := os.MkdirAll(filepath.Join(e.node.Root(sb.ID), "src/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.node.Root(sb.ID), "src/sub/f"), []byte("tarred"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, tarball := e.do("GET", base+"/archive?path=/src", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" || len(tarball) < 512 {
		t.Fatalf("download: %d %v %d bytes", resp.StatusCode, resp.Header, len(tarball))
	}
	resp, b := e.do("GET", base+"/archive?path=/missing", nil)
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	resp, b = e.do("POST", base+"/mkdir", strings.NewReader(`{"path":"/dst"}`))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("mkdir: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("PUT", base+"/archive?path=/dst", strings.NewReader(string(tarball)))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	var found bool
	_ = filepath.Walk(filepath.Join(e.node.Root(sb.ID), "dst"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "f" {
			got, _ := os.ReadFile(p)
			found = string(got) == "tarred"
		}
		return nil
	})
	if !found {
		t.Fatal("extracted file not found under /dst")
	}
	resp, b = e.do("PUT", base+"/archive?path=/dst", strings.NewReader("not a tar at all"))
	if resp.StatusCode < 400 {
		t.Fatalf("garbage tar accepted: %d %s", resp.StatusCode, b)
	}
}
