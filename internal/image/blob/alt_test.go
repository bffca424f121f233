package blob_test

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/dsec-dev/dsec/internal/image/blob"
)

// alternating spreads calls over two Store values on the same shared directory.
type alternating struct {
	a, b blob.Store
	n    atomic.Int64
}

func (x *alternating) pick() blob.Store {
	if x.n.Add(1)%2 == 0 {
		return x.a
	}
	return x.b
}
func (x *alternating) Put(ctx context.Context, d string, r io.Reader, n int64) error {
	return x.pick().Put(ctx, d, r, n)
}
func (x *alternating) Open(ctx context.Context, d string) (io.ReadCloser, error) {
	return x.pick().Open(ctx, d)
}
func (x *alternating) ReadAt(ctx context.Context, d string, p []byte, off int64) (int, error) {
	return x.pick().ReadAt(ctx, d, p, off)
}
func (x *alternating) Stat(ctx context.Context, d string) (int64, error) {
	return x.pick().Stat(ctx, d)
}
func (x *alternating) Delete(ctx context.Context, d string) error { return x.pick().Delete(ctx, d) }
func (x *alternating) List(ctx context.Context) ([]string, error) { return x.pick().List(ctx) }
