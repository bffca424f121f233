package e2b

import (
	"context"
	"io"
	"sync"
	"time"

	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
	"github.com/dsec-dev/dsec/internal/session"
)

// Processes started through Process.Start: each is one streaming exec of the
// session service, run on a context of its own so that it outlives the request
// that started it (as envd's processes do), with its output fanned out to every
// stream attached to it. The table is per sandbox; ended processes are kept a
// while so a late Connect still gets their end event.

const (
	// syntheticPIDBase numbers processes whose exec never reported a PID (a step
	// answered from the trajectory log): above Linux's largest pid_max, so they
	// never collide with a real PID.
	syntheticPIDBase = 1 << 22
	// endedKeep is how long an ended process stays visible to Connect.
	endedKeep = time.Minute
	// subscriberQueue is each attached stream's queue of events; a full queue
	// holds the process's output back (as a pipe would).
	subscriberQueue = 64
)

// proc is one process.
type proc struct {
	sandbox string
	tag     string
	config  *pb.ProcessConfig
	tty     bool
	stdin   *io.PipeWriter // nil: the process has no writable stdin
	stdinR  *io.PipeReader
	control chan session.Control
	cancel  context.CancelFunc

	started chan struct{} // closed once pid is known
	done    chan struct{} // closed once end is set

	mu       sync.Mutex
	pid      uint32
	subs     map[*subscriber]struct{}
	end      *pb.ProcessEvent_EndEvent
	startErr error // the exec failed before the process started
}

// subscriber is one stream attached to a process.
type subscriber struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{}
}

func newProc(sandbox string, req *pb.StartRequest, withStdin bool) *proc {
	p := &proc{sandbox: sandbox, tag: req.GetTag(), config: req.GetProcess(), tty: req.Pty != nil,
		control: make(chan session.Control, 4), started: make(chan struct{}), done: make(chan struct{}),
		subs: map[*subscriber]struct{}{}}
	if withStdin {
		p.stdinR, p.stdin = io.Pipe()
	}
	return p
}

// attach subscribes a stream; it returns nil if the process already ended.
func (p *proc) attach() *subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return nil
	}
	s := &subscriber{ch: make(chan *pb.ProcessEvent, subscriberQueue), gone: make(chan struct{})}
	p.subs[s] = struct{}{}
	return s
}

// detach unsubscribes s (its stream ended).
func (p *proc) detach(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// setPID records the PID once; later calls keep the first.
func (p *proc) setPID(pid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		p.pid = pid
		close(p.started)
	}
}

func (p *proc) getPID() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// subscribersLocked lists the attached streams.
func (p *proc) subscribersLocked() []*subscriber {
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	return subs
}

// deliver hands ev to subs, waiting for room in their queues.
func deliver(subs []*subscriber, ev *pb.ProcessEvent) {
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// publish hands ev to every attached stream.
func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	subs := p.subscribersLocked()
	p.mu.Unlock()
	deliver(subs, ev)
}

// finish records the end event and tells every stream attached so far; later
// ones see p.end.
func (p *proc) finish(end *pb.ProcessEvent_EndEvent) {
	ev := &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
	p.mu.Lock()
	p.end = end
	subs := p.subscribersLocked()
	p.mu.Unlock()
	deliver(subs, ev)
	close(p.done)
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
}

// output is an io.Writer that publishes one kind of output as data events.
type output struct {
	p    *proc
	kind int // 0 stdout, 1 stderr, 2 pty
	t    *procTable
}

func (o output) Write(b []byte) (int, error) {
	o.t.ensurePID(o.p)
	data := append([]byte(nil), b...)
	ev := &pb.ProcessEvent_DataEvent{}
	switch o.kind {
	case 0:
		ev.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: data}
	case 1:
		ev.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: data}
	default:
		ev.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: data}
	}
	o.p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: ev}})
	return len(b), nil
}

// procTable holds every sandbox's processes.
type procTable struct {
	mu        sync.Mutex
	sandboxes map[string]*sandboxProcs
	synthetic uint32
}

type sandboxProcs struct {
	live  map[uint32]*proc
	ended map[uint32]*proc
}

func newProcTable() *procTable { return &procTable{sandboxes: map[string]*sandboxProcs{}} }

func (t *procTable) sandboxLocked(id string) *sandboxProcs {
	sp := t.sandboxes[id]
	if sp == nil {
		sp = &sandboxProcs{live: map[uint32]*proc{}, ended: map[uint32]*proc{}}
		t.sandboxes[id] = sp
	}
	return sp
}

// register makes p findable under pid.
func (t *procTable) register(p *proc, pid uint32) {
	p.setPID(pid)
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.sandboxLocked(p.sandbox)
	delete(sp.ended, pid)
	sp.live[p.getPID()] = p
}

// ensurePID gives p a synthetic PID if its exec has not reported one.
func (t *procTable) ensurePID(p *proc) {
	select {
	case <-p.started:
		return
	default:
	}
	t.mu.Lock()
	t.synthetic++
	pid := syntheticPIDBase + t.synthetic
	t.mu.Unlock()
	t.register(p, pid)
}

// ended moves p to the ended processes, where it stays for endedKeep.
func (t *procTable) ended(p *proc) {
	pid := p.getPID()
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.sandboxes[p.sandbox]
	if sp == nil || sp.live[pid] != p {
		return
	}
	delete(sp.live, pid)
	sp.ended[pid] = p
	time.AfterFunc(endedKeep, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if sp := t.sandboxes[p.sandbox]; sp != nil && sp.ended[pid] == p {
			delete(sp.ended, pid)
			if len(sp.live) == 0 && len(sp.ended) == 0 {
				delete(t.sandboxes, p.sandbox)
			}
		}
	})
}

// find returns the process sel names (live first, then recently ended).
func (t *procTable) find(sandbox string, sel *pb.ProcessSelector) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.sandboxes[sandbox]
	if sp == nil || sel == nil {
		return nil
	}
	switch s := sel.Selector.(type) {
	case *pb.ProcessSelector_Pid:
		if p := sp.live[s.Pid]; p != nil {
			return p
		}
		return sp.ended[s.Pid]
	case *pb.ProcessSelector_Tag:
		for _, m := range []map[uint32]*proc{sp.live, sp.ended} {
			for _, p := range m {
				if p.tag != "" && p.tag == s.Tag {
					return p
				}
			}
		}
	}
	return nil
}

// list returns a sandbox's live processes.
func (t *procTable) list(sandbox string) []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.sandboxes[sandbox]
	if sp == nil {
		return nil
	}
	out := make([]*proc, 0, len(sp.live))
	for _, p := range sp.live {
		out = append(out, p)
	}
	return out
}

// dropSandbox ends the processes of a sandbox that is gone and forgets them.
func (t *procTable) dropSandbox(id string) {
	t.mu.Lock()
	sp := t.sandboxes[id]
	delete(t.sandboxes, id)
	t.mu.Unlock()
	if sp == nil {
		return
	}
	for _, p := range sp.live {
		p.cancel()
	}
}
