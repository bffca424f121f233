package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Directory watching. session.FS has no change notification, so a watcher
// polls: it lists the directory (the whole tree when recursive) every
// WatchInterval and reports the differences as envd's events: a new name is
// CREATE, a gone one REMOVE, a changed size or modification time WRITE, a
// changed mode CHMOD. Two writes within one modification-time tick that keep
// the size are one event or none; renames show as REMOVE + CREATE.

// Bounds: a polling watcher's undelivered events, and the polling watchers of
// one sandbox (each polls on its own until removed).
const (
	maxPendingEvents      = 10_000
	maxWatchersPerSandbox = 64
)

// snapshot maps names relative to the watched directory to what a watcher
// compares between polls.
type snapshot map[string]api.FileInfo

// watcher polls one directory.
type watcher struct {
	fs        session.FS
	dir       string
	recursive bool
	entries   bool // include EntryInfo in events
	last      snapshot
}

// newWatcher checks dir is a directory and takes the first snapshot.
func newWatcher(ctx context.Context, fs session.FS, dir string, recursive, entries bool) (*watcher, error) {
	fi, err := fs.Stat(ctx, dir)
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found", dir))
		}
		return nil, rpcErr(err)
	}
	if fi.Type != "dir" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", dir))
	}
	w := &watcher{fs: fs, dir: dir, recursive: recursive, entries: entries}
	if w.last, err = w.scan(ctx); err != nil {
		return nil, rpcErr(err)
	}
	return w, nil
}

func (w *watcher) scan(ctx context.Context) (snapshot, error) {
	s := snapshot{}
	var walk func(rel string) error
	walk = func(rel string) error {
		list, err := w.fs.List(ctx, path.Join(w.dir, rel))
		if err != nil {
			if rel != "" && errdefs.Is(err, api.CodeNotFound) {
				return nil // removed between polls
			}
			return err
		}
		for _, fi := range list {
			if len(s) >= maxListEntries {
				return errdefs.New(api.CodeResourceExhausted, "more than %d entries under %s", maxListEntries, w.dir)
			}
			name := path.Join(rel, fi.Name)
			s[name] = fi
			if w.recursive && fi.Type == "dir" {
				if err := walk(name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return s, walk("")
}

// poll scans again and returns the events since the last scan.
func (w *watcher) poll(ctx context.Context) ([]*pb.FilesystemEvent, error) {
	cur, err := w.scan(ctx)
	if err != nil {
		return nil, err
	}
	var evs []*pb.FilesystemEvent
	add := func(name string, t pb.EventType, fi *api.FileInfo) {
		ev := &pb.FilesystemEvent{Name: name, Type: t}
		if w.entries && fi != nil {
			ev.Entry = entryInfo(*fi, path.Join(w.dir, name))
		}
		evs = append(evs, ev)
	}
	names := make([]string, 0, len(cur)+len(w.last))
	for n := range cur {
		names = append(names, n)
	}
	for n := range w.last {
		if _, ok := cur[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		old, had := w.last[n]
		st, has := cur[n]
		switch {
		case !had:
			add(n, pb.EventType_EVENT_TYPE_CREATE, &st)
			if st.Type == "file" && st.Size > 0 {
				add(n, pb.EventType_EVENT_TYPE_WRITE, &st)
			}
		case !has:
			add(n, pb.EventType_EVENT_TYPE_REMOVE, nil)
		default:
			if old.Type == "file" && (old.Size != st.Size || !old.ModTime.Equal(st.ModTime)) {
				add(n, pb.EventType_EVENT_TYPE_WRITE, &st)
			}
			if old.Mode != st.Mode {
				add(n, pb.EventType_EVENT_TYPE_CHMOD, &st)
			}
		}
	}
	w.last = cur
	return evs, nil
}

// WatchDir streams a directory's changes: start first, then events and
// keepalives until the client ends the stream or its timeout passes.
func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	return s.withPath(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, dir, _ string) error {
		w, err := newWatcher(ctx, fs, dir, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
			return err
		}
		tick := time.NewTicker(s.h.opts.WatchInterval)
		defer tick.Stop()
		var keep <-chan time.Time
		if d := keepaliveInterval(req.Header()); d > 0 {
			t := time.NewTicker(d)
			defer t.Stop()
			keep = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-keep:
				if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
					return err
				}
			case <-tick.C:
				evs, err := w.poll(ctx)
				if err != nil {
					if errdefs.Is(err, api.CodeNotFound) {
						return connect.NewError(connect.CodeNotFound, fmt.Errorf("watched directory %s was removed", dir))
					}
					return rpcErr(err)
				}
				for _, ev := range evs {
					if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
						return err
					}
				}
			}
		}
	})
}

// pollWatcher is a watcher of the polling RPCs: it runs on its own and keeps
// events until GetWatcherEvents takes them.
type pollWatcher struct {
	sandbox string
	cancel  context.CancelFunc

	mu      sync.Mutex
	pending []*pb.FilesystemEvent
	err     error
}

// watchTable holds the polling watchers by ID.
type watchTable struct {
	mu sync.Mutex
	m  map[string]*pollWatcher
}

func newWatchTable() *watchTable { return &watchTable{m: map[string]*pollWatcher{}} }

// add registers pw under id unless its sandbox has too many watchers.
func (t *watchTable) add(id string, pw *pollWatcher) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, o := range t.m {
		if o.sandbox == pw.sandbox {
			n++
		}
	}
	if n >= maxWatchersPerSandbox {
		return false
	}
	t.m[id] = pw
	return true
}

func (t *watchTable) take(id string) *pollWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	pw := t.m[id]
	delete(t.m, id)
	return pw
}

func (t *watchTable) get(id string) *pollWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (t *watchTable) dropSandbox(sandbox string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, pw := range t.m {
		if pw.sandbox == sandbox {
			pw.cancel()
			delete(t.m, id)
		}
	}
}

func (t *watchTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, pw := range t.m {
		pw.cancel()
		delete(t.m, id)
	}
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	sandbox := req.Header().Get(SandboxIDHeader)
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	dir, err := resolvePath(req.Msg.GetPath(), user)
	if err != nil {
		return nil, rpcErr(err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(session.WithoutStep(ctx)))
	fs, err := s.h.svc.FS(wctx, sandbox)
	if err != nil {
		cancel()
		return nil, rpcErr(err)
	}
	w, err := newWatcher(ctx, fs, dir, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		cancel()
		fs.Close()
		return nil, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pw := &pollWatcher{sandbox: sandbox, cancel: cancel}
	if !s.h.watches.add(id, pw) {
		cancel()
		fs.Close()
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers; remove some first", sandbox, maxWatchersPerSandbox))
	}
	go func() {
		defer fs.Close()
		tick := time.NewTicker(s.h.opts.WatchInterval)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			evs, err := w.poll(wctx)
			pw.mu.Lock()
			if err != nil {
				pw.err = err
				pw.mu.Unlock()
				return
			}
			pw.pending = append(pw.pending, evs...)
			if n := len(pw.pending) - maxPendingEvents; n > 0 {
				pw.pending = pw.pending[n:] // the oldest go first
			}
			pw.mu.Unlock()
		}
	}()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	pw := s.h.watches.get(req.Msg.GetWatcherId())
	if pw == nil || pw.sandbox != req.Header().Get(SandboxIDHeader) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", req.Msg.GetWatcherId()))
	}
	pw.mu.Lock()
	evs, err := pw.pending, pw.err
	pw.pending = nil
	pw.mu.Unlock()
	if err != nil && len(evs) == 0 {
		s.h.watches.take(req.Msg.GetWatcherId())
		if errdefs.Is(err, api.CodeNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, errors.New("the watched directory was removed"))
		}
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	pw := s.h.watches.get(req.Msg.GetWatcherId())
	if pw == nil || pw.sandbox != req.Header().Get(SandboxIDHeader) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", req.Msg.GetWatcherId()))
	}
	s.h.watches.take(req.Msg.GetWatcherId())
	pw.cancel()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
