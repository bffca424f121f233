package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// maxCreateParallel bounds --parallel.
const maxCreateParallel = 256

// createMany creates n sandboxes like req, parallel at a time, printing each ID
// to out as it is created and a progress bar to bar (when it is a terminal).
// A request ID becomes REQUEST_ID-i for the i-th sandbox (0-based), so a
// retried batch returns the same sandboxes. Failures are counted and the first
// is returned after every create was tried.
func createMany(ctx context.Context, cl *client.Client, req api.CreateSandboxRequest, n, parallel int, out, bar io.Writer) error {
	if n < 1 {
		return fmt.Errorf("--count must be at least 1, got %d", n)
	}
	if parallel < 1 || parallel > maxCreateParallel {
		return fmt.Errorf("--parallel must be from 1 to %d, got %d", maxCreateParallel, parallel)
	}
	b := progress.New(bar, "creating", int64(n))
	defer b.Finish()
	var (
		mu     sync.Mutex
		first  error
		failed int
		tried  int
		wg     sync.WaitGroup
	)
	slots := make(chan struct{}, parallel)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		slots <- struct{}{}
		tried++
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			r := req
			if req.RequestID != "" {
				r.RequestID = fmt.Sprintf("%s-%d", req.RequestID, i)
			}
			sb, err := cl.Create(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
				b.Fail(1)
				return
			}
			b.Above(func() { fmt.Fprintln(out, sb.ID) })
			b.Add(1)
		}()
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("%d of %d creates failed; the first: %w", failed, n, first)
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(fmt.Errorf("stopped after %d creates", tried), err)
	}
	return nil
}
