package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxListEntries bounds one ListDir answer (and one watcher's snapshot).
const maxListEntries = 100_000

// filesystemService implements envd's filesystem.Filesystem over session.FS.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	h *Handler
}

// homeOf is the home directory relative paths resolve against.
func homeOf(user string) string {
	if user == "" || user == "root" || user == "0" {
		return "/root"
	}
	return "/home/" + user
}

// resolvePath makes p absolute the way envd does: "~" and relative paths are
// under the user's home. The session FS keeps the result inside the sandbox.
func resolvePath(p, user string) (string, error) {
	if user == "." || user == ".." || strings.ContainsAny(user, "/\x00") {
		return "", errdefs.Invalid("invalid user name %q", user)
	}
	return resolveHome(p, homeOf(user))
}

// resolveHome is resolvePath with the user's home directory known.
func resolveHome(p, home string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid("path is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("path contains a NUL byte")
	}
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = home + "/" + p
	}
	return path.Clean(p), nil
}

// fileType maps dsec's file type to envd's.
func fileType(t string) pb.FileType {
	switch t {
	case "file":
		return pb.FileType_FILE_TYPE_FILE
	case "dir":
		return pb.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		return pb.FileType_FILE_TYPE_SYMLINK
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

func ownerName(id int) string {
	if id == 0 {
		return "root"
	}
	return strconv.Itoa(id)
}

// entryInfo maps a FileInfo to envd's EntryInfo; p is the entry's absolute path.
func entryInfo(fi api.FileInfo, p string) *pb.EntryInfo {
	mode := os.FileMode(fi.Mode).Perm()
	switch fi.Type {
	case "dir":
		mode |= os.ModeDir
	case "symlink":
		mode |= os.ModeSymlink
	case "other":
		mode |= os.ModeIrregular
	}
	e := &pb.EntryInfo{Name: path.Base(p), Type: fileType(fi.Type), Path: p, Size: fi.Size, Mode: fi.Mode & 0o7777,
		Permissions: mode.String(), Owner: ownerName(fi.UID), Group: ownerName(fi.GID),
		ModifiedTime: timestamppb.New(fi.ModTime), Metadata: entryMetadata(fi.Xattrs)}
	if fi.Type == "symlink" {
		// envd gives the link's target as an absolute path.
		link := fi.Link
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(p), link)
		}
		e.SymlinkTarget = &link
	}
	return e
}

// withFS opens the sandbox's FS for an RPC and resolves its user.
func (s *filesystemService) withFS(ctx context.Context, hd http.Header, fn func(fs session.FS, a account) error) error {
	user, err := userOf(hd)
	if err != nil {
		return err
	}
	sandbox := hd.Get(SandboxIDHeader)
	fs, err := s.h.svc.FS(ctx, sandbox)
	if err != nil {
		return rpcErr(err)
	}
	defer fs.Close()
	a, err := s.h.lookupUser(ctx, fs, sandbox, user)
	if err != nil {
		return rpcErr(err)
	}
	return fn(fs, a)
}

// withPath is withFS with the request's path resolved.
func (s *filesystemService) withPath(ctx context.Context, hd http.Header, raw string, fn func(fs session.FS, p string, a account) error) error {
	return s.withFS(ctx, hd, func(fs session.FS, a account) error {
		p, err := resolveHome(raw, a.Home)
		if err != nil {
			return rpcErr(err)
		}
		return fn(fs, p, a)
	})
}

// entry runs fn on the resolved path and answers with the entry it returns.
func (s *filesystemService) entry(ctx context.Context, hd http.Header, raw string, fn func(fs session.FS, p string, a account) (api.FileInfo, string, error)) (*pb.EntryInfo, error) {
	var out *pb.EntryInfo
	err := s.withPath(ctx, hd, raw, func(fs session.FS, p string, a account) error {
		fi, at, err := fn(fs, p, a)
		if err != nil {
			return rpcErr(err)
		}
		out = entryInfo(fi, at)
		s.h.names(ctx, fs, hd.Get(SandboxIDHeader)).apply(out)
		return nil
	})
	return out, err
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	e, err := s.entry(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, p string, _ account) (api.FileInfo, string, error) {
		fi, err := fs.Stat(ctx, p)
		return fi, p, err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents; AlreadyExists when it exists.
func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	e, err := s.entry(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, p string, a account) (api.FileInfo, string, error) {
		aux := session.WithoutStep(ctx)
		if fi, err := fs.Stat(aux, p); err == nil {
			if fi.Type == "dir" {
				return fi, p, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
			}
			return fi, p, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
		} else if !errdefs.Is(err, api.CodeNotFound) {
			return fi, p, err
		}
		top, err := missingTop(aux, fs, p)
		if err != nil {
			return api.FileInfo{}, p, err
		}
		fi, err := fs.Mkdir(ctx, p, 0o755, true)
		if err != nil {
			return fi, p, err
		}
		if err := s.h.chown(aux, req.Header().Get(SandboxIDHeader), a, true, top); err != nil {
			return fi, p, err
		}
		fi, err = fs.Stat(aux, p)
		return fi, p, err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	e, err := s.entry(ctx, req.Header(), req.Msg.GetSource(), func(fs session.FS, from string, a account) (api.FileInfo, string, error) {
		to, err := resolveHome(req.Msg.GetDestination(), a.Home)
		if err != nil {
			return api.FileInfo{}, "", err
		}
		if err := fs.Rename(ctx, from, to); err != nil {
			if errdefs.Is(err, api.CodeNotFound) {
				return api.FileInfo{}, "", connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: %w", err))
			}
			return api.FileInfo{}, "", err
		}
		fi, err := fs.Stat(session.WithoutStep(ctx), to)
		return fi, to, err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// listTree lists dir down to depth levels (1: its entries only).
func listTree(ctx context.Context, fs session.FS, dir string, depth int, out []*pb.EntryInfo) ([]*pb.EntryInfo, error) {
	entries, err := fs.List(ctx, dir)
	if err != nil {
		return out, err
	}
	for _, fi := range entries {
		if len(out) >= maxListEntries {
			return out, errdefs.New(api.CodeResourceExhausted, "more than %d entries under %s", maxListEntries, dir)
		}
		p := path.Join(dir, fi.Name)
		out = append(out, entryInfo(fi, p))
		if fi.Type == "dir" && depth > 1 {
			if out, err = listTree(ctx, fs, p, depth-1, out); err != nil && !errdefs.Is(err, api.CodeNotFound) {
				return out, err
			}
		}
	}
	return out, nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	var out []*pb.EntryInfo
	err := s.withPath(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, p string, _ account) error {
		fi, err := fs.Stat(session.WithoutStep(ctx), p)
		if err != nil {
			if errdefs.Is(err, api.CodeNotFound) {
				return connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: %s", p))
			}
			return rpcErr(err)
		}
		if fi.Type != "dir" {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
		}
		depth := max(int(req.Msg.GetDepth()), 1)
		out, err = listTree(ctx, fs, p, depth, nil)
		s.h.names(ctx, fs, req.Header().Get(SandboxIDHeader)).apply(out...)
		return rpcErr(err)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: out}), nil
}

// Remove removes a file or a directory tree; a missing path is no error (as
// envd's os.RemoveAll).
func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	err := s.withPath(ctx, req.Header(), req.Msg.GetPath(), func(fs session.FS, p string, _ account) error {
		if p == "/" {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
		}
		if err := fs.Remove(ctx, p, true); err != nil && !errdefs.Is(err, api.CodeNotFound) {
			return rpcErr(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}
