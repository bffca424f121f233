// Package blobtest is the conformance suite every blob.Store implementation passes.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Run runs the suite; newStore returns a fresh, empty store for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	ctx := context.Background()
	data := make([]byte, 300_000)
	rand.New(rand.NewSource(1)).Read(data)
	dg := blob.FromBytes(data)

	t.Run("PutGetReadAtStatListDelete", func(t *testing.T) {
		s := newStore(t)
		if l, err := s.List(ctx); err != nil || len(l) != 0 {
			t.Fatalf("empty list = %v, %v", l, err)
		}
		if err := s.Put(ctx, dg, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		small := []byte("hello blob")
		sdg := blob.FromBytes(small)
		if err := s.Put(ctx, sdg, bytes.NewReader(small), -1); err != nil { // unknown size
			t.Fatal(err)
		}
		empty := blob.FromBytes(nil)
		if err := s.Put(ctx, empty, bytes.NewReader(nil), 0); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Stat(ctx, empty); err != nil || n != 0 {
			t.Fatalf("empty stat %d %v", n, err)
		}
		// Put again: idempotent.
		if err := s.Put(ctx, dg, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		rc, err := s.Open(ctx, dg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("open: %d bytes, %v", len(got), err)
		}
		if n, err := s.Stat(ctx, dg); err != nil || n != int64(len(data)) {
			t.Fatalf("stat = %d, %v", n, err)
		}
		for _, r := range []struct{ off, n int }{{0, 1}, {0, 4096}, {12345, 70000}, {len(data) - 10, 10}, {len(data) / 2, 1 << 16}} {
			p := make([]byte, r.n)
			n, err := s.ReadAt(ctx, dg, p, int64(r.off))
			if err != nil || n != r.n || !bytes.Equal(p, data[r.off:r.off+r.n]) {
				t.Fatalf("readat %d+%d: n=%d err=%v", r.off, r.n, n, err)
			}
		}
		// Short read at EOF.
		p := make([]byte, 100)
		n, err := s.ReadAt(ctx, dg, p, int64(len(data)-40))
		if n != 40 || err != io.EOF || !bytes.Equal(p[:40], data[len(data)-40:]) {
			t.Fatalf("readat across EOF: n=%d err=%v", n, err)
		}
		n, err = s.ReadAt(ctx, dg, p, int64(len(data)))
		if n != 0 || err != io.EOF {
			t.Fatalf("readat at EOF: n=%d err=%v", n, err)
		}
		n, err = s.ReadAt(ctx, dg, p, int64(len(data)+1000))
		if n != 0 || err != io.EOF {
			t.Fatalf("readat past EOF: n=%d err=%v", n, err)
		}
		l, err := s.List(ctx)
		if err != nil || len(l) != 3 || !contains(l, dg) || !contains(l, sdg) || !contains(l, empty) {
			t.Fatalf("list = %v, %v", l, err)
		}
		if err := s.Delete(ctx, dg); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, dg); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("stat after delete: %v", err)
		}
		if l, _ := s.List(ctx); len(l) != 2 || contains(l, dg) {
			t.Fatalf("list after delete = %v", l)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := newStore(t)
		missing := blob.FromBytes([]byte("missing"))
		if _, err := s.Stat(ctx, missing); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("stat: %v (%s)", err, errdefs.CodeOf(err))
		}
		if _, err := s.Open(ctx, missing); !errdefs.Is(err, api.CodeNotFound) {
			// Some stores find out on first read.
			t.Fatalf("open: %v (%s)", err, errdefs.CodeOf(err))
		}
		if _, err := s.ReadAt(ctx, missing, make([]byte, 10), 0); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("readat: %v (%s)", err, errdefs.CodeOf(err))
		}
		if err := s.Delete(ctx, missing); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("delete: %v (%s)", err, errdefs.CodeOf(err))
		}
	})

	t.Run("InvalidDigest", func(t *testing.T) {
		s := newStore(t)
		for _, d := range []string{"", "sha256:abc", "md5:" + dg[7:], "sha256:" + string(bytes.Repeat([]byte("Z"), 64)), "sha256:../../" + dg[13:]} {
			if err := s.Put(ctx, d, bytes.NewReader(data), -1); !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Fatalf("put %q: %v", d, err)
			}
			if _, err := s.Stat(ctx, d); !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Fatalf("stat %q: %v", d, err)
			}
		}
	})

	t.Run("DigestMismatch", func(t *testing.T) {
		s := newStore(t)
		bad := append([]byte(nil), data...)
		bad[1000] ^= 1
		err := s.Put(ctx, dg, bytes.NewReader(bad), int64(len(bad)))
		if !errdefs.Is(err, api.CodeInvalidArgument) || !errors.Is(err, blob.ErrDigestMismatch) {
			t.Fatalf("mismatch: %v (%s)", err, errdefs.CodeOf(err))
		}
		err = s.Put(ctx, dg, bytes.NewReader(bad), -1)
		if !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Fatalf("mismatch (unknown size): %v", err)
		}
		assertEmpty(t, s, dg)
	})

	t.Run("Truncated", func(t *testing.T) {
		s := newStore(t)
		// Declared size, body cut short.
		err := s.Put(ctx, dg, bytes.NewReader(data[:len(data)/2]), int64(len(data)))
		if !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Fatalf("short body: %v (%s)", err, errdefs.CodeOf(err))
		}
		// Body longer than declared.
		err = s.Put(ctx, dg, bytes.NewReader(append(data, 'x')), int64(len(data)))
		if err == nil {
			t.Fatal("long body accepted")
		}
		// Reader fails midway.
		err = s.Put(ctx, dg, io.MultiReader(bytes.NewReader(data[:1000]), iotest.ErrReader(io.ErrUnexpectedEOF)), int64(len(data)))
		if err == nil {
			t.Fatal("failing reader accepted")
		}
		assertEmpty(t, s, dg)
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.Put(ctx, dg, iotest.HalfReader(bytes.NewReader(data)), int64(len(data)))
			}()
		}
		// Readers racing the writers see either not_found or the whole blob.
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if n, err := s.Stat(ctx, dg); err == nil && n != int64(len(data)) {
					errs <- errors.New("partial blob visible")
				} else if err != nil && !errdefs.Is(err, api.CodeNotFound) {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		rc, err := s.Open(ctx, dg)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Fatal("content differs after concurrent puts")
		}
		if l, _ := s.List(ctx); len(l) != 1 {
			t.Fatalf("list = %v (temp files leaked?)", l)
		}
	})

	t.Run("ContextCancel", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, dg, bytes.NewReader(data), int64(len(data))); err == nil {
			t.Fatal("put with canceled context succeeded")
		}
		assertEmpty(t, s, dg)
		// Cancel while the body is being read.
		cctx, cancel = context.WithCancel(ctx)
		r := &cancelReader{r: bytes.NewReader(data), after: 50_000, cancel: cancel}
		if err := s.Put(cctx, dg, r, int64(len(data))); err == nil {
			t.Fatal("put canceled midway succeeded")
		}
		assertEmpty(t, s, dg)
		if err := s.Put(ctx, dg, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		cctx, cancel = context.WithCancel(ctx)
		cancel()
		if _, err := s.Stat(cctx, dg); err == nil {
			t.Fatal("stat with canceled context succeeded")
		}
		if _, err := s.ReadAt(cctx, dg, make([]byte, 10), 0); err == nil {
			t.Fatal("readat with canceled context succeeded")
		}
	})
}

type cancelReader struct {
	r      io.Reader
	n      int
	after  int
	cancel func()
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if len(p) > 8192 {
		p = p[:8192]
	}
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}

func assertEmpty(t *testing.T, s blob.Store, dg string) {
	t.Helper()
	if _, err := s.Stat(context.Background(), dg); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("blob stored after a failed put: %v", err)
	}
	if l, err := s.List(context.Background()); err != nil || len(l) != 0 {
		t.Fatalf("list after failed put = %v, %v", l, err)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
