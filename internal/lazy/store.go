package lazy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// OpenStore opens a blob store from its spec, as an environment manifest names it:
//
//	dir:PATH     a local blob directory (blob.NewDir); PATH must exist
//	posix:PATH   a shared POSIX mount (blob.NewPOSIX)
//	s3://...     an S3-compatible store (blob.ParseSpec)
//
// A spec may end in ";rate=BYTES_PER_SECOND" to throttle reads (benchmarks: a store
// at 100 MB/s is "dir:/x;rate=100000000").
func OpenStore(spec string) (blob.Store, error) {
	base, opts, _ := strings.Cut(spec, ";")
	var rate int64
	for _, kv := range strings.Split(opts, ";") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "rate":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return nil, errdefs.Invalid("blob store %q: bad rate %q", spec, v)
			}
			rate = n
		default:
			return nil, errdefs.Invalid("blob store %q: unknown option %q", spec, k)
		}
	}
	s, err := blob.Open(base, false)
	if err != nil {
		return nil, err
	}
	if rate > 0 {
		s = Throttle(s, rate)
	}
	return s, nil
}

// Throttle wraps s so that ReadAt and Open deliver at most rate bytes per second in
// total (a token bucket shared by all readers), like a remote store behind a link of
// that bandwidth. The bucket holds throttleBurst of credit: Go's timers round
// sub-millisecond sleeps up to about a millisecond, which would charge every 64 KiB
// read (0.66 ms at 100 MB/s) twice what the link costs; with the burst, any run's
// transfer time is still the link's to within throttleBurst.
func Throttle(s blob.Store, rate int64) blob.Store {
	return &throttled{Store: s, rate: rate, next: time.Now()}
}

const throttleBurst = 2 * time.Millisecond

type throttled struct {
	blob.Store
	rate int64
	mu   sync.Mutex
	next time.Time // when the link is free again
}

func (t *throttled) wait(ctx context.Context, n int) error {
	d := time.Duration(float64(n) / float64(t.rate) * float64(time.Second))
	t.mu.Lock()
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	t.next = t.next.Add(d)
	until := t.next.Add(-throttleBurst)
	t.mu.Unlock()
	if !until.After(now) {
		return nil
	}
	select {
	case <-time.After(time.Until(until)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *throttled) ReadAt(ctx context.Context, digest string, p []byte, off int64) (int, error) {
	n, err := t.Store.ReadAt(ctx, digest, p, off)
	if werr := t.wait(ctx, n); werr != nil && err == nil {
		err = werr
	}
	return n, err
}

func (t *throttled) String() string { return fmt.Sprintf("%v (throttled to %d B/s)", t.Store, t.rate) }
