package e2b

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Directory watching compares listings (session.ScanDir, session.DiffDir):
// renames show as REMOVE + CREATE, two writes within one modification-time
// tick that keep the size are one event or none. WatchDir's stream polls every
// WatchInterval while it lasts. The polling watchers (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) are the node's directory watches
// (session.Files.CreateWatch), so a watcher created through one API server is
// read and removed through any other; the watcher ID is the node's watch ID,
// with entriesSuffix when events carry entries.

const entriesSuffix = ".entries"

// watchEvents maps the changes of directory dir to envd's events (an entry's
// path is its own, else dir joined with the event's name).
func watchEvents(dir string, evs []api.WatchEvent, entries bool) []*pb.FilesystemEvent {
	out := make([]*pb.FilesystemEvent, 0, len(evs))
	for _, e := range evs {
		ev := &pb.FilesystemEvent{Name: e.Name, Type: eventType(e.Op)}
		if entries && e.Entry != nil {
			at := e.Entry.Path
			if at == "" {
				at = path.Join(dir, e.Name)
			}
			ev.Entry = entryInfo(*e.Entry, at)
		}
		out = append(out, ev)
	}
	return out
}

func eventType(op string) pb.EventType {
	switch op {
	case api.WatchCreate:
		return pb.EventType_EVENT_TYPE_CREATE
	case api.WatchWrite:
		return pb.EventType_EVENT_TYPE_WRITE
	case api.WatchRemove:
		return pb.EventType_EVENT_TYPE_REMOVE
	case api.WatchChmod:
		return pb.EventType_EVENT_TYPE_CHMOD
	}
	return pb.EventType_EVENT_TYPE_UNSPECIFIED
}

// checkDir answers NotFound or InvalidArgument unless dir is a directory.
func checkDir(ctx context.Context, fs session.FS, dir string) error {
	fi, err := fs.Stat(ctx, dir)
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found", dir))
		}
		return rpcErr(err)
	}
	if fi.Type != "dir" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", dir))
	}
	return nil
}

// WatchDir streams a directory's changes: start first, then events and
// keepalives until the client ends the stream or its timeout passes.
func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	return s.withPath(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, dir string, _ account) error {
		if err := checkDir(ctx, fs, dir); err != nil {
			return err
		}
		recursive := req.Msg.GetRecursive()
		last, err := session.ScanDir(ctx, fs, dir, recursive, maxListEntries)
		if err != nil {
			return rpcErr(err)
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
				cur, err := session.ScanDir(ctx, fs, dir, recursive, maxListEntries)
				if err != nil {
					if errdefs.Is(err, api.CodeNotFound) {
						return connect.NewError(connect.CodeNotFound, fmt.Errorf("watched directory %s was removed", dir))
					}
					return rpcErr(err)
				}
				for _, ev := range watchEvents(dir, session.DiffDir(last, cur), req.Msg.GetIncludeEntry()) {
					if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
						return err
					}
				}
				last = cur
			}
		}
	})
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	sandbox := req.Header().Get(SandboxIDHeader)
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	a, err := s.h.userOfSandbox(ctx, sandbox, user)
	if err != nil {
		return nil, rpcErr(err)
	}
	dir, err := resolveHome(req.Msg.GetPath(), a.Home)
	if err != nil {
		return nil, rpcErr(err)
	}
	w, err := s.h.svc.CreateWatch(session.WithoutStep(ctx), sandbox, api.WatchRequest{Path: dir, Recursive: req.Msg.GetRecursive()})
	switch {
	case errdefs.Is(err, api.CodeNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found", dir))
	case err != nil:
		return nil, rpcErr(err)
	}
	id := w.ID
	if req.Msg.GetIncludeEntry() {
		id += entriesSuffix
	}
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// watchNotFound is the answer for an unknown watcher ID.
func watchNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", id))
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	sandbox := req.Header().Get(SandboxIDHeader)
	id, entries := strings.CutSuffix(req.Msg.GetWatcherId(), entriesSuffix)
	w, err := s.h.svc.WatchEvents(session.WithoutStep(ctx), sandbox, id)
	switch {
	case errdefs.Is(err, api.CodeNotFound) && strings.Contains(err.Error(), "removed"):
		return nil, connect.NewError(connect.CodeNotFound, errors.New("the watched directory was removed"))
	case errdefs.Is(err, api.CodeNotFound):
		return nil, watchNotFound(req.Msg.GetWatcherId())
	case err != nil:
		return nil, rpcErr(err)
	}
	out := watchEvents("", w, entries) // entries carry their paths
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: out}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id, _ := strings.CutSuffix(req.Msg.GetWatcherId(), entriesSuffix)
	err := s.h.svc.RemoveWatch(session.WithoutStep(ctx), req.Header().Get(SandboxIDHeader), id)
	switch {
	case errdefs.Is(err, api.CodeNotFound):
		return nil, watchNotFound(req.Msg.GetWatcherId())
	case err != nil:
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
