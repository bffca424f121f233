package lazy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestPrefetchList: a node records the order its reader touched chunks; a fresh
// node given that list as the layer's prefetch list fetches those chunks in the
// background, so the same reads then need no fetch of their own.
func TestPrefetchList(t *testing.T) {
	needRoot(t)
	storeDir, dg, _ := buildLayer(t)
	ctx := context.Background()
	read := func(mnt string) {
		t.Helper()
		for _, f := range []string{"hello.txt", "f3", "f5"} {
			if _, err := os.ReadFile(filepath.Join(mnt, f)); err != nil {
				t.Fatal(err)
			}
		}
	}

	first := newTestDaemon(t, Config{ChunkSize: 64 << 10, Grace: time.Hour})
	resp, err := first.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil {
		t.Fatal(err)
	}
	read(resp.Mounts[0])
	al := first.layers[dg[7:]].accessList()
	if len(al.Chunks) < 32 || al.Layer != dg || al.ChunkSize != 64<<10 { // two 1 MiB files at least
		t.Fatalf("access list: %d chunks, %+v", len(al.Chunks), al)
	}
	b, _ := json.Marshal(al)
	list := blob.FromBytes(b)
	st, _ := blob.NewDir(storeDir)
	if err := st.Put(ctx, list, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}

	second := newTestDaemon(t, Config{ChunkSize: 64 << 10, Grace: time.Hour})
	ref := image.Layer{Digest: dg, Store: "dir:" + storeDir, PrefetchList: list}
	resp, err = second.Acquire(ctx, AcquireRequest{Holder: "b", Layers: []image.Layer{ref}})
	if err != nil {
		t.Fatal(err)
	}
	cached := func() bool {
		for _, c := range al.Chunks {
			if !second.cache.Has(chunkKey{dg[7:], c}) {
				return false
			}
		}
		return true
	}
	if !testwait.Until(20*time.Second, cached) {
		t.Fatalf("prefetch did not finish: %+v", second.Stats().Layers[0])
	}
	before := second.Stats().Layers[0]
	read(resp.Mounts[0])
	after := second.Stats().Layers[0]
	// The kernel's readahead may ask for a few chunks the first run's reads did
	// not (seen: 3 of 37 under load); most of the reads must be prefetched.
	if slack := max(2, len(al.Chunks)/8); after.Fetches-before.Fetches > int64(slack) || after.Prefetched == 0 {
		t.Fatalf("reads after the prefetch fetched %d chunks themselves (prefetched %d of %d)", after.Fetches-before.Fetches, after.Prefetched, len(al.Chunks))
	}

	// A list of another layer is refused (logged); the layer still mounts and reads.
	other := AccessList{Layer: "sha256:" + string(bytes.Repeat([]byte("a"), 64)), ChunkSize: 64 << 10, Chunks: []int64{0}}
	ob, _ := json.Marshal(other)
	od := blob.FromBytes(ob)
	_ = st.Put(ctx, od, bytes.NewReader(ob), int64(len(ob)))
	third := newTestDaemon(t, Config{ChunkSize: 64 << 10, Grace: time.Hour})
	resp, err = third.Acquire(ctx, AcquireRequest{Holder: "c", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir, PrefetchList: od}}})
	if err != nil {
		t.Fatal(err)
	}
	read(resp.Mounts[0])
	if p := third.Stats().Layers[0].Prefetched; p != 0 {
		t.Fatalf("a list of another layer prefetched %d chunks", p)
	}
}

func TestParseAccessList(t *testing.T) {
	good := `{"layer":"sha256:x","chunk_size":65536,"chunks":[3,1,2]}`
	if al, err := ParseAccessList([]byte(good), "sha256:x", 65536, 4); err != nil || len(al.Chunks) != 3 {
		t.Fatalf("good list: %+v %v", al, err)
	}
	for name, b := range map[string]string{
		"json":       `{`,
		"layer":      `{"layer":"sha256:y","chunk_size":65536,"chunks":[1]}`,
		"chunk size": `{"layer":"sha256:x","chunk_size":4096,"chunks":[1]}`,
		"range":      `{"layer":"sha256:x","chunk_size":65536,"chunks":[4]}`,
		"negative":   `{"layer":"sha256:x","chunk_size":65536,"chunks":[-1]}`,
	} {
		if _, err := ParseAccessList([]byte(b), "sha256:x", 65536, 4); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseAccessList(f *testing.F) {
	f.Add([]byte(`{"layer":"sha256:x","chunk_size":65536,"chunks":[3,1,2]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		al, err := ParseAccessList(b, "sha256:x", 65536, 16)
		if err != nil {
			return
		}
		for _, c := range al.Chunks {
			if c < 0 || c >= 16 {
				t.Fatalf("accepted chunk %d", c)
			}
		}
	})
}
