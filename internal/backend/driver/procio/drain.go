package procio

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
	select {
	case <-done:
		return // the usual case: the pumps saw every writer close
	default:
	}
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

// restMax bounds what drainRest takes after Drain gave up: a descendant that
// keeps writing cannot hold the stop.
const restMax = 1 << 20

// stopReading ends a pump's wait on f: at once (a read deadline in the past)
// when f is pollable, so the pump still takes what f holds (drainRest), else
// by closing f.
func stopReading(f *os.File) {
	if f.SetReadDeadline(time.Now()) != nil {
		f.Close()
	}
}

// drainRest is a pump's last step once stopReading stopped it (err is the
// read's error): it takes what f holds now without waiting, up to restMax
// bytes, and hands it to write. Output the process wrote before it exited is
// kept even when the pump had not been scheduled to read it within the grace
// (a busy machine). On a terminal whose slave ends are all closed the kernel
// first flushes what it still buffers, so nothing in flight is lost there
// either.
func drainRest(f *os.File, err error, buf []byte, write func([]byte) error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	rc, cerr := f.SyscallConn()
	if cerr != nil {
		return
	}
	for total := 0; total < restMax; {
		var n int
		var rerr error
		if rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), buf) }) != nil || rerr != nil || n <= 0 {
			return // EAGAIN: nothing more now; EIO/EOF: every writer is gone
		}
		total += n
		if write(buf[:n]) != nil {
			return
		}
	}
}
