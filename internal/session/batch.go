package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// BatchRollbackTimeout bounds how long CreateEach spends deleting what a
// failed batch created.
const BatchRollbackTimeout = 2 * time.Minute

// errNotStarted marks the batch members CreateEach never started because
// another had failed.
var errNotStarted = errors.New("not started: another member of the batch failed")

// CreateEach creates the n sandboxes of a batch, every one or none (the
// contract's CreateBatch): create makes the i-th, at most parallel at once.
// Once one fails no further one starts (unstarted, if not nil, is told of each
// one skipped; those running finish), every sandbox made is deleted again with
// del (under a context of its own: the caller's may be what failed) and the
// first failure is returned, naming its index. A member whose start command
// failed (start_failed) was made but is not returned: its node keeps it for
// inspection.
func CreateEach(ctx context.Context, n, parallel int, create func(ctx context.Context, i int) (api.Sandbox, error),
	del func(ctx context.Context, id string) error, unstarted func(i int)) ([]api.Sandbox, error) {
	out := make([]api.Sandbox, n)
	errs := make([]error, n)
	var mu sync.Mutex
	failed := false
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop {
			<-sem
			errs[i] = errNotStarted
			if unstarted != nil {
				unstarted(i)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = create(ctx, i)
			if errs[i] != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	first := -1
	for i, err := range errs {
		if err != nil && err != errNotStarted {
			first = i
			break
		}
	}
	if first < 0 {
		return out, nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), BatchRollbackTimeout)
	defer cancel()
	for i, sb := range out {
		if errs[i] == nil && sb.ID != "" {
			_ = del(dctx, sb.ID)
		}
	}
	kept := "none kept"
	if errdefs.Is(errs[first], api.CodeStartFailed) {
		// Its sandbox exists, kept for inspection (the error names it).
		kept = "the others deleted"
	}
	return nil, fmt.Errorf("batch of %d: sandboxes[%d] failed, %s: %w", n, first, kept, errs[first])
}
