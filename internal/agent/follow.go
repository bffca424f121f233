package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// followFallbackPoll is how often a follower looks at the logs again when the
// host gives the agent no inotify instance (its per-user limit reached).
const followFallbackPoll = 20 * time.Millisecond

// FollowProcess implements session.Service: it answers as soon as the logs
// hold output past the request's offsets, or the process has ended, or the
// wait has passed. A background process writes its logs itself (no agent copy
// in between), so the agent learns of new output from the kernel: the
// follower waits on an inotify watch of the two logs and on the process's end.
func (m *Manager) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	if err := req.Validate(); err != nil {
		return api.ProcessOutput{}, err
	}
	sb, bp, err := m.proc(id, procID)
	if err != nil {
		return api.ProcessOutput{}, err
	}
	paths := [2]string{m.logPath(id, procID, "stdout"), m.logPath(id, procID, "stderr")}
	offs := [2]int64{req.StdoutOffset, req.StderrOffset}
	var wake <-chan struct{}
	var tick, timeout <-chan time.Time
	if req.WaitMs > 0 {
		ch, stop := m.logs.subscribe(paths[:]...)
		defer stop()
		wake = ch
		if ch == nil { // no inotify: look again now and then
			t := time.NewTicker(followFallbackPoll)
			defer t.Stop()
			tick = t.C
		}
		t := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	last := req.WaitMs == 0
	for {
		// The process first, then its logs: an ended process has written
		// everything it will, so what is read then is all of it.
		out := api.ProcessOutput{Process: bp.view()}
		complete := true
		for i, dst := range [2]*[]byte{&out.Stdout, &out.Stderr} {
			b, all, err := readLog(paths[i], offs[i], req.Limit())
			if err != nil {
				return api.ProcessOutput{}, err
			}
			*dst, complete = b, complete && all
		}
		out.Ended = !out.Process.Running && complete
		if !out.Process.Running && sb.gone() {
			return api.ProcessOutput{}, errDeletedWhileRunning(id, "process "+procID)
		}
		if last || len(out.Stdout) > 0 || len(out.Stderr) > 0 || !out.Process.Running {
			return out, nil
		}
		select {
		case <-wake:
		case <-tick:
		case <-bp.done:
		case <-timeout:
			last = true
		case <-ctx.Done():
			return out, nil
		}
	}
}

// readLog reads at most limit bytes of the log at path from off; all reports
// that they reach the log's end as it was when read.
func readLog(path string, off int64, limit int) (b []byte, all bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, errdefs.Internal(err, "open process log")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, errdefs.Internal(err, "stat process log")
	}
	n := fi.Size() - off
	if n <= 0 {
		return nil, true, nil
	}
	all = n <= int64(limit)
	n = min(n, int64(limit))
	b = make([]byte, n)
	got, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, errdefs.Internal(err, "read process log")
	}
	return b[:got], all && int64(got) == n, nil
}

// logNotifier wakes the followers of process logs when a log is written: one
// inotify instance per agent (made on first use), one watch per followed log
// file, shared by the followers of that file.
type logNotifier struct {
	once sync.Once
	f    *os.File // the inotify instance; nil when none could be made
	fd   int
	done chan struct{} // closed when the reader has stopped

	mu      sync.Mutex
	watches map[int32]map[chan struct{}]struct{} // watch descriptor → followers
	closed  bool
}

// start makes the inotify instance and its reader.
func (n *logNotifier) start() {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return // followers look again now and then instead
	}
	n.fd = fd
	n.f = os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a Read
	n.watches = map[int32]map[chan struct{}]struct{}{}
	n.done = make(chan struct{})
	go n.read()
}

// subscribe returns a channel that receives (at most one pending) wake-up
// after any of paths is written, and the function that stops it. The channel
// is nil when the agent has no inotify instance.
func (n *logNotifier) subscribe(paths ...string) (<-chan struct{}, func()) {
	n.once.Do(n.start)
	if n.f == nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	var wds []int32
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, func() {}
	}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(n.fd, p, unix.IN_MODIFY)
		if err != nil {
			// The log is gone (its sandbox was deleted) or the watch limit
			// is reached: wake the follower at once, it reads again. The
			// send must not block (n.mu is held): one wake-up pending is
			// enough, whichever of paths failed.
			select {
			case ch <- struct{}{}:
			default:
			}
			continue
		}
		w := int32(wd)
		if n.watches[w] == nil {
			n.watches[w] = map[chan struct{}]struct{}{}
		}
		n.watches[w][ch] = struct{}{}
		wds = append(wds, w)
	}
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, w := range wds {
			subs := n.watches[w]
			delete(subs, ch)
			if len(subs) == 0 && subs != nil {
				delete(n.watches, w)
				if !n.closed {
					_, _ = unix.InotifyRmWatch(n.fd, uint32(w)) // EINVAL once the file is gone
				}
			}
		}
	}
}

// read delivers the instance's events to the followers of their watches until
// the instance is closed.
func (n *logNotifier) read() {
	defer close(n.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		k, err := n.f.Read(buf)
		if err != nil {
			return
		}
		n.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				for _, subs := range n.watches {
					wakeAll(subs)
				}
				continue
			}
			wakeAll(n.watches[ev.Wd])
		}
		n.mu.Unlock()
	}
}

func wakeAll(subs map[chan struct{}]struct{}) {
	for ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close stops the reader and releases the instance.
func (n *logNotifier) close() {
	n.once.Do(func() {}) // no instance after this
	n.mu.Lock()
	n.closed = true
	f := n.f
	n.mu.Unlock()
	if f == nil {
		return
	}
	f.Close()
	<-n.done
}
