package lazy

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/image"
)

// BenchmarkLazyRead reads the 8 MiB of files of a mounted layer through erofs
// and layerd's FUSE file in 128 KiB reads, with the page caches dropped before
// each pass and every chunk in layerd's chunk cache: the cost of layerd's read
// path itself (FUSE round trips, chunk cache reads), without a blob store.
//
//	go test -run '^$' -bench LazyRead -benchtime 30x ./internal/image/lazy/
func BenchmarkLazyRead(b *testing.B) {
	needRoot(b)
	for _, loop := range []bool{false, true} {
		b.Run(map[bool]string{false: "file-backed", true: "loop-device"}[loop], func(b *testing.B) {
			storeDir, dg, _ := buildLayer(b)
			d := newTestDaemon(b, Config{Grace: time.Hour, LoopDevice: loop})
			resp, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
			if err != nil {
				b.Fatal(err)
			}
			mnt := resp.Mounts[0]
			blobFile := filepath.Join(FuseDir(d.cfg.Root), strings.TrimPrefix(dg, "sha256:"))
			names := []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"}
			buf := make([]byte, 128<<10)
			pass := func() int64 {
				var n int64
				for _, name := range names {
					f, err := os.Open(filepath.Join(mnt, name))
					if err != nil {
						b.Fatal(err)
					}
					_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
					m, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
					f.Close()
					if err != nil {
						b.Fatal(err)
					}
					n += m
				}
				return n
			}
			pass() // fills the chunk cache
			dropFile := func(p string) {
				if f, err := os.Open(p); err == nil {
					_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
					f.Close()
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dropFile(blobFile)
				b.StartTimer()
				b.SetBytes(pass())
			}
			b.StopTimer()
			d.Release("a")
		})
	}
}
