package bench

import (
	"context"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/progress"
)

// runLoad runs op(i) for i in [0, n) on p workers and returns each call's latency,
// the wall time, the number of failures and the first error. With stopOnError, no
// new call starts after the first failure.
func runLoad(ctx context.Context, n, p int, stopOnError bool, op func(worker, i int) error) (lat []time.Duration, wall time.Duration, failures int, first error) {
	lat = make([]time.Duration, n)
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	bar := progress.Start(ctx, "runs", int64(n)) // silent unless the command asked for one on a terminal
	defer bar.Finish()
	t0 := time.Now()
	for w := 0; w < p; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := stopOnError && first != nil
				mu.Unlock()
				if i >= n || stop || ctx.Err() != nil {
					return
				}
				s := time.Now()
				err := op(w, i)
				lat[i] = time.Since(s)
				if err != nil {
					bar.Fail(1)
				} else {
					bar.Add(1)
				}
				if err != nil {
					mu.Lock()
					failures++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(t0), failures, first
}
