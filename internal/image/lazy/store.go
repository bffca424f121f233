package lazy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
)

// OpenStore opens a blob store from its spec, as an environment manifest names it:
//
//	dir:PATH     a local blob directory (blob.NewDir); PATH must exist
//	posix:PATH   a shared POSIX mount (blob.NewPOSIX)
//	s3://...     an S3-compatible store (blob.ParseSpec)
//
// A spec may end in ";rate=BYTES_PER_SECOND" to throttle reads and
// ";latency=DURATION" to delay each read by a round trip (benchmarks: a store at
// 100 MB/s, 5 ms away, is "dir:/x;rate=100000000;latency=5ms").
func OpenStore(spec string) (blob.Store, error) {
	base, opts, _ := strings.Cut(spec, ";")
	var rate int64
	var latency time.Duration
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
		case "latency":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, errdefs.Invalid("blob store %q: bad latency %q", spec, v)
			}
			latency = d
		default:
			return nil, errdefs.Invalid("blob store %q: unknown option %q", spec, k)
		}
	}
	s, err := blob.Open(base, false)
	if err != nil {
		return nil, err
	}
	if rate > 0 || latency > 0 {
		s = Throttle(s, rate, latency)
	}
	return s, nil
}

// Throttle wraps s so that ReadAt delivers at most rate bytes per second in total
// (a token bucket shared by all readers; 0: unlimited) after a round trip of
// latency per read (concurrent reads wait theirs at once), like a remote store
// behind a link of that bandwidth and delay. The bucket holds throttleBurst of credit: Go's timers round
// sub-millisecond sleeps up to about a millisecond, which would charge every 64 KiB
// read (0.66 ms at 100 MB/s) twice what the link costs; with the burst, any run's
// transfer time is still the link's to within throttleBurst.
func Throttle(s blob.Store, rate int64, latency time.Duration) blob.Store {
	return &throttled{Store: s, rate: rate, latency: latency, next: time.Now()}
}

const throttleBurst = 2 * time.Millisecond

type throttled struct {
	blob.Store
	rate    int64
	latency time.Duration
	mu      sync.Mutex
	next    time.Time // when the link is free again
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *throttled) wait(ctx context.Context, n int) error {
	if t.rate <= 0 {
		return nil
	}
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
	return sleep(ctx, time.Until(until))
}

func (t *throttled) ReadAt(ctx context.Context, digest string, p []byte, off int64) (int, error) {
	if t.latency > 0 {
		if err := sleep(ctx, t.latency); err != nil {
			return 0, err
		}
	}
	n, err := t.Store.ReadAt(ctx, digest, p, off)
	if werr := t.wait(ctx, n); werr != nil && err == nil {
		err = werr
	}
	return n, err
}

func (t *throttled) String() string {
	return fmt.Sprintf("%v (throttled to %d B/s, %v per read)", t.Store, t.rate, t.latency)
}
