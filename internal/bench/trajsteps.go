package bench

import (
	"sync"
	"sync/atomic"
)

// runSteps runs trajs trajectories of stepsEach steps concurrently, each
// trajectory's steps in order; a trajectory stops at its first failing step.
// It returns how many steps ran to completion (what a steps/s figure may
// count: not the steps a failed trajectory never reached) and each failure.
func runSteps(trajs, stepsEach int, step func(traj, k int) error) (ran int64, errs []error) {
	var done atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range trajs {
		wg.Go(func() {
			for k := 1; k <= stepsEach; k++ {
				if err := step(g, k); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return done.Load(), errs
}
