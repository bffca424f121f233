package bench

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/dsec-dev/dsec/internal/image"
)

// genBlock is the unit of generated content: its first half pseudo-random,
// its second half zeros, so gzip makes about half of it (image content is
// neither all random nor all text).
const genBlock = 64 << 10

// genFileBytes is the size of each generated file (the last of a layer may
// be smaller).
const genFileBytes = 1 << 20

// genLayer is a gzip layer of n bytes of semi-compressible content in files
// dir/f0000.bin, dir/f0001.bin, ... of genFileBytes each. Its content is
// generated again from seed each time it is read, so a large image needs no
// memory or disk of its own before the registry stores it.
func genLayer(seed uint64, dir string, n int64) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeGenTar(pw, seed, dir, n)) }()
		return pr, nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
}

func writeGenTar(w io.Writer, seed uint64, dir string, n int64) error {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	rng := rand.NewChaCha8(key)
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
		return err
	}
	buf := make([]byte, genBlock)
	for i := 0; n > 0; i++ {
		size := min(n, genFileBytes)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s/f%04d.bin", dir, i), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		for left := size; left > 0; {
			k := min(left, genBlock)
			_, _ = rng.Read(buf[:genBlock/2])
			clear(buf[genBlock/2:])
			if _, err := tw.Write(buf[:k]); err != nil {
				return err
			}
			left -= k
		}
		n -= size
	}
	return tw.Close()
}

// diskUsage is the disk space the files under dir take (allocated blocks,
// as du counts them; 0 if dir is missing), on dir's file system only: the
// file systems mounted under it (a layer's EROFS, a container's overlay)
// are not counted again.
func diskUsage(dir string) int64 {
	var root syscall.Stat_t
	if err := syscall.Stat(dir, &root); err != nil {
		return 0
	}
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, ierr := e.Info()
		if ierr != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Dev != root.Dev {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		total += st.Blocks * 512
		return nil
	})
	return total
}

// diskUsageByDir is diskUsage of each directory directly under dir.
func diskUsageByDir(dir string) map[string]int64 {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, e := range es {
		if e.IsDir() {
			if n := diskUsage(filepath.Join(dir, e.Name())); n > 0 {
				out[e.Name()] = n
			}
		}
	}
	return out
}

// memClaims are pull.LayerClaims kept in memory: the bench's nodes share one
// blob store inside one process, as a cluster's nodes share one through etcd.
type memClaims struct {
	mu   sync.Mutex
	made map[string]image.Layer
	busy map[string]chan struct{}
}

func newMemClaims() *memClaims {
	return &memClaims{made: map[string]image.Layer{}, busy: map[string]chan struct{}{}}
}

func (c *memClaims) Claim(ctx context.Context, dg string, have func(image.Layer) bool) (*image.Layer, func(*image.Layer) error, error) {
	for {
		c.mu.Lock()
		if el, ok := c.made[dg]; ok && have(el) {
			c.mu.Unlock()
			return &el, nil, nil
		}
		ch, busy := c.busy[dg]
		if !busy {
			ch = make(chan struct{})
			c.busy[dg] = ch
			c.mu.Unlock()
			return nil, func(el *image.Layer) error {
				c.mu.Lock()
				defer c.mu.Unlock()
				if el != nil {
					c.made[dg] = *el
				}
				delete(c.busy, dg)
				close(ch)
				return nil
			}, nil
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}
