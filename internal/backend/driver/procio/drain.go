package procio

import (
	"sync/atomic"
	"time"
)

// DrainMax bounds Drain however busy the pumps are: a descendant that keeps
// writing to the process's stdout after it exited (`yes &`) does not hold the
// exec open for longer than this.
const DrainMax = 10 * time.Second

// activity tracks the progress of a process's output pumps, so that Drain gives
// up on output that stopped coming (a daemon holding the pipe open), not on
// output a slow consumer has not taken yet: the grace counts from the exit or
// from the pumps' last progress, whichever is later, and never runs while a
// write to the consumer is in progress.
type activity struct {
	last    atomic.Int64 // UnixNano of the last read with data or finished write
	writing atomic.Int32 // writes to the consumer in progress
}

func (a *activity) progress() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) beginWrite() { a.writing.Add(1) }

func (a *activity) endWrite() {
	a.progress()
	a.writing.Add(-1)
}

// wait returns when done is closed. Once the pumps have been idle for grace
// (or limit has passed) it calls stop, which must make them end, and waits.
func (a *activity) wait(done <-chan struct{}, grace, limit time.Duration, stop func()) {
	start := time.Now()
	tick := time.NewTicker(max(grace/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if now.Sub(start) < limit {
				if a.writing.Load() > 0 {
					continue
				}
				last := time.Unix(0, a.last.Load())
				if last.Before(start) {
					last = start
				}
				if now.Sub(last) < grace {
					continue
				}
			}
		}
		break
	}
	stop()
	<-done
}
