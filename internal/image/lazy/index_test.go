package lazy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// putIndex stores the chunk index of raw (at chunk bytes) and returns its digest.
func putIndex(t *testing.T, storeDir string, raw []byte, chunk int64) string {
	t.Helper()
	_, ix, err := blob.IndexReader(bytes.NewReader(raw), chunk)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := blob.NewDir(storeDir)
	b := ix.Marshal()
	dg := blob.FromBytes(b)
	if err := st.Put(context.Background(), dg, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	return dg
}

// TestIndexVerifiesEachChunk: with a chunk index, a chunk altered in the blob
// store is caught on the first read that fetches it (EIO to the reader, the layer
// marked corrupt, later acquires refused with bad_gateway), while chunks that
// match are served; the index's chunk size wins over the node's configuration.
func TestIndexVerifiesEachChunk(t *testing.T) {
	needRoot(t)
	storeDir, dg, raw := buildLayer(t)
	ix := putIndex(t, storeDir, raw, 16<<10)
	d := newTestDaemon(t, Config{ChunkSize: 256 << 10, Grace: time.Hour})
	ctx := context.Background()

	// Flip one byte of file data near the end of the stored blob (not metadata, so
	// the mount itself succeeds).
	p := filepath.Join(storeDir, "sha256", strings.TrimPrefix(dg, "sha256:"))
	bad := append([]byte(nil), raw...)
	off := len(bad) - (300 << 10)
	bad[off] ^= 0xff
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := image.Layer{Digest: dg, Store: "dir:" + storeDir, Index: ix}
	resp, err := d.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{ref}})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Stats().Layers[0]; s.ChunkSize != 16<<10 {
		t.Fatalf("chunk size %d, want the index's 16 KiB", s.ChunkSize)
	}
	if b, err := os.ReadFile(filepath.Join(resp.Mounts[0], "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
		t.Fatalf("intact file: %q %v", b, err)
	}
	var readErr error
	for i := 0; i < 8 && readErr == nil; i++ {
		_, readErr = os.ReadFile(filepath.Join(resp.Mounts[0], "f"+string(rune('0'+i))))
	}
	if readErr == nil {
		t.Fatal("every file read back although one chunk of the blob was altered")
	}
	if s := d.Stats().Layers[0]; s.Corrupt == "" {
		t.Fatalf("layer not marked corrupt: %+v", s)
	}
	d.Release("a")
	if _, err := d.Acquire(ctx, AcquireRequest{Holder: "b", Layers: []image.Layer{ref}}); errdefs.CodeOf(err) != api.CodeBadGateway {
		t.Fatalf("acquire of a corrupt layer: %v", err)
	}
}

func TestIndexErrors(t *testing.T) {
	needRoot(t)
	storeDir, dg, raw := buildLayer(t)
	d := newTestDaemon(t, Config{Grace: time.Hour})
	ctx := context.Background()
	st, _ := blob.NewDir(storeDir)
	other := putIndex(t, storeDir, raw[:len(raw)-4096], 64<<10) // an index of another size
	junk := []byte("not an index at all")
	junkDg := blob.FromBytes(junk)
	_ = st.Put(ctx, junkDg, bytes.NewReader(junk), int64(len(junk)))
	for _, c := range []struct {
		name, index string
		code        api.Code
	}{
		{"missing index", "sha256:" + strings.Repeat("1", 64), api.CodeNotFound},
		{"index of another blob size", other, api.CodeBadGateway},
		{"not an index", junkDg, api.CodeBadGateway},
		{"bad digest", "md5:x", api.CodeInvalidArgument},
	} {
		_, err := d.Acquire(ctx, AcquireRequest{Holder: "x", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir, Index: c.index}}})
		if errdefs.CodeOf(err) != c.code {
			t.Errorf("%s: %v (code %q), want %s", c.name, err, errdefs.CodeOf(err), c.code)
		}
	}
	if m := mountsUnder(t, d.cfg.Root); len(m) != 1 { // only the FUSE server
		t.Errorf("mounts after failures: %v", m)
	}
}
