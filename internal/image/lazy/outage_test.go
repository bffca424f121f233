package lazy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
)

// flakyS3 is an in-memory S3 over real HTTP on a fixed 127.0.0.1 port that can
// be stopped (connections refused) and started again with the same content.
type flakyS3 struct {
	t    *testing.T
	addr string
	h    http.Handler
	srv  *http.Server
}

func startFlakyS3(t *testing.T, bucket string) *flakyS3 {
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	s := &flakyS3{t: t, addr: "127.0.0.1:0", h: gofakes3.New(be).Server()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *flakyS3) start() {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("s3 listen %s: %v", s.addr, err)
	}
	s.addr = ln.Addr().String()
	s.srv = &http.Server{Handler: s.h}
	go func() { _ = s.srv.Serve(ln) }()
}

func (s *flakyS3) stop() {
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

// TestBlobStoreOutage stops the S3 store a lazily mounted layer is read from and
// starts it again. With StoreWait (the default) a read of uncached data blocks
// while the store is away and completes with the right bytes once it is back;
// with StoreWait < 0 it fails at once with EIO (the layer's stats say why) and the
// same read succeeds once the store is back. Nothing else is disturbed: cached
// data reads on throughout.
func TestBlobStoreOutage(t *testing.T) {
	needRoot(t)
	src, _, dg, raw := buildLayerSrc(t)
	s3 := startFlakyS3(t, "layers")
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://" + s3.addr, Bucket: "layers", AccessKey: "k", SecretKey: "s",
		Region: "us-east-1", TempDir: t.TempDir(), MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Put(ctx, dg, bytes.NewReader(raw), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	want := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mount := func(t *testing.T, wait time.Duration) (*Daemon, string) {
		d := newTestDaemon(t, Config{Grace: time.Hour, StoreWait: wait})
		d.stores["s3"] = store
		resp, err := d.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "s3"}}})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(resp.Mounts[0], "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
			t.Fatalf("read hello: %q %v", b, err)
		}
		return d, resp.Mounts[0]
	}

	t.Run("reads wait", func(t *testing.T) {
		_, mnt := mount(t, 30*time.Second)
		s3.stop()
		type result struct {
			b   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := os.ReadFile(filepath.Join(mnt, "f2"))
			done <- result{b, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("read finished while the store was down: %d bytes, %v", len(r.b), r.err)
		case <-time.After(1500 * time.Millisecond):
		}
		// Cached data is not disturbed meanwhile.
		if b, err := os.ReadFile(filepath.Join(mnt, "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
			t.Fatalf("cached read during the outage: %q %v", b, err)
		}
		back := time.Now()
		s3.start()
		select {
		case r := <-done:
			if r.err != nil || !bytes.Equal(r.b, want("f2")) {
				t.Fatalf("read after the store came back: %d bytes, %v", len(r.b), r.err)
			}
			t.Logf("read completed %v after the store came back", time.Since(back).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatal("read still blocked 20 s after the store came back")
		}
	})

	t.Run("reads fail fast", func(t *testing.T) {
		d, mnt := mount(t, -1)
		s3.stop()
		t0 := time.Now()
		_, err := os.ReadFile(filepath.Join(mnt, "f5"))
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("read with the store down: %v, want EIO", err)
		}
		if time.Since(t0) > 10*time.Second {
			t.Errorf("failing read took %v", time.Since(t0))
		}
		st := d.Stats().Layers[0]
		if !strings.Contains(st.StoreError, "unreachable") {
			t.Errorf("layer stats do not say why reads fail: %+v", st)
		}
		t.Logf("read failed after %v: %v; layer store_error: %s", time.Since(t0).Round(time.Millisecond), err, st.StoreError)
		s3.start()
		b, err := os.ReadFile(filepath.Join(mnt, "f5"))
		if err != nil || !bytes.Equal(b, want("f5")) {
			t.Fatalf("read after the store came back: %d bytes, %v", len(b), err)
		}
		if st := d.Stats().Layers[0]; st.StoreError != "" {
			t.Errorf("store error not cleared: %s", st.StoreError)
		}
	})
}
