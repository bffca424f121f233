package trajectory

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FS opened with a tagged context returns a file system whose read (Open), write
// (WriteFile), archive upload (ExtractTar), Mkdir and Remove are steps when their
// own context is tagged; it opens the inner file system only when a live step or
// an untagged call needs it, so replays answer even when the sandbox is gone.
func (s *Service) FS(ctx context.Context, id string) (session.FS, error) {
	if _, _, ok := session.StepFrom(ctx); !ok {
		return s.inner.FS(ctx, id)
	}
	return &stepFS{s: s, id: id}, nil
}

type stepFS struct {
	s  *Service
	id string

	mu    sync.Mutex
	inner session.FS
}

// fs opens the inner file system once.
func (f *stepFS) fs(ctx context.Context) (session.FS, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inner != nil {
		return f.inner, nil
	}
	fs, err := f.s.inner.FS(session.WithoutStep(ctx), f.id)
	if err != nil {
		return nil, err
	}
	f.inner = fs
	return fs, nil
}

func (f *stepFS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inner == nil {
		return nil
	}
	return f.inner.Close()
}

// step runs a tagged file operation: begin, then on a live step op (on the inner
// file system, with a context that is neither cancelled nor tagged), then settle
// with the outcome done returns. It returns the logged or live outcome.
func (f *stepFS) step(ctx context.Context, spec stepSpec, op func(context.Context, session.FS) (Outcome, error)) (*Outcome, error) {
	tag, out, _ := session.StepFrom(ctx)
	o, l, err := f.s.begin(ctx, tag, out, spec)
	switch {
	case err != nil:
		return nil, err
	case o != nil:
		if o.Error != nil {
			return nil, replayError(o)
		}
		return o, nil
	}
	defer l.guard()
	lctx := session.WithoutStep(l.ctx)
	fs, err := f.fs(lctx)
	if err != nil {
		return nil, l.fail(err)
	}
	res, err := op(lctx, fs)
	if err != nil {
		return nil, l.fail(err)
	}
	l.finishOutcome(res)
	return &res, nil
}

func tagged(ctx context.Context) bool {
	_, _, ok := session.StepFrom(ctx)
	return ok
}

func (f *stepFS) Open(ctx context.Context, path string) (io.ReadCloser, api.FileInfo, error) {
	if !tagged(ctx) {
		fs, err := f.fs(ctx)
		if err != nil {
			return nil, api.FileInfo{}, err
		}
		return fs.Open(ctx, path)
	}
	tag, out, _ := session.StepFrom(ctx)
	spec := stepSpec{op: OpReadFile, sandbox: f.id, args: FileArgs{Path: CleanPath(path)}}
	o, l, err := f.s.begin(ctx, tag, out, spec)
	switch {
	case err != nil:
		return nil, api.FileInfo{}, err
	case o != nil:
		if o.Error != nil {
			return nil, api.FileInfo{}, replayError(o)
		}
		fi := api.FileInfo{Size: int64(len(o.Data))}
		if o.File != nil {
			fi = *o.File
		}
		return io.NopCloser(bytes.NewReader(o.Data)), fi, nil
	}
	defer l.guard()
	lctx := session.WithoutStep(l.ctx)
	fs, err := f.fs(lctx)
	if err != nil {
		return nil, api.FileInfo{}, l.fail(err)
	}
	rc, info, err := fs.Open(lctx, path)
	if err != nil {
		return nil, api.FileInfo{}, l.fail(err)
	}
	// Read what was announced: a file that grew meanwhile is cut at its size.
	head := make([]byte, min(info.Size, MaxBodyLog+1))
	if _, err := io.ReadFull(rc, head); err != nil {
		rc.Close()
		l.abort(MarkUnknown) // the file shrank while it was read
		return nil, api.FileInfo{}, errdefs.Internal(err, "reading %s", path)
	}
	if info.Size > MaxBodyLog {
		return newBigReader(l, head, struct {
			io.Reader
			io.Closer
		}{io.LimitReader(rc, info.Size-int64(len(head))), rc}, info.Size), info, nil
	}
	rc.Close()
	l.finishOutcome(Outcome{File: &info, Data: head})
	return io.NopCloser(bytes.NewReader(head)), info, nil
}

func (f *stepFS) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	if !tagged(ctx) {
		fs, err := f.fs(ctx)
		if err != nil {
			return api.FileInfo{}, err
		}
		return fs.WriteFile(ctx, path, mode, r, max)
	}
	sp, err := spool(r, max, f.s.opts.TempDir)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer sp.close()
	a := FileArgs{Path: CleanPath(path), Mode: uint32(mode), ContentSHA256: sp.sum, ContentSize: sp.size}
	o, err := f.step(ctx, stepSpec{op: OpWriteFile, sandbox: f.id, args: a, input: sp.data, stored: sp.stored},
		func(ctx context.Context, fs session.FS) (Outcome, error) {
			info, err := fs.WriteFile(ctx, path, mode, sp.reader(), max)
			return Outcome{File: &info}, err
		})
	if err != nil || o.File == nil {
		return api.FileInfo{}, err
	}
	return *o.File, nil
}

func (f *stepFS) ExtractTar(ctx context.Context, path string, r io.Reader) error {
	if !tagged(ctx) {
		fs, err := f.fs(ctx)
		if err != nil {
			return err
		}
		return fs.ExtractTar(ctx, path, r)
	}
	sp, err := spool(r, 0, f.s.opts.TempDir)
	if err != nil {
		return err
	}
	defer sp.close()
	a := FileArgs{Path: CleanPath(path), ContentSHA256: sp.sum, ContentSize: sp.size}
	_, err = f.step(ctx, stepSpec{op: OpUploadArchive, sandbox: f.id, args: a, input: sp.data, stored: sp.stored},
		func(ctx context.Context, fs session.FS) (Outcome, error) {
			return Outcome{}, fs.ExtractTar(ctx, path, sp.reader())
		})
	return err
}

func (f *stepFS) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	if !tagged(ctx) {
		fs, err := f.fs(ctx)
		if err != nil {
			return api.FileInfo{}, err
		}
		return fs.Mkdir(ctx, path, mode, parents)
	}
	a := FileArgs{Path: CleanPath(path), Mode: uint32(mode), Parents: parents}
	o, err := f.step(ctx, stepSpec{op: OpMkdir, sandbox: f.id, args: a},
		func(ctx context.Context, fs session.FS) (Outcome, error) {
			info, err := fs.Mkdir(ctx, path, mode, parents)
			return Outcome{File: &info}, err
		})
	if err != nil || o.File == nil {
		return api.FileInfo{}, err
	}
	return *o.File, nil
}

func (f *stepFS) Remove(ctx context.Context, path string, recursive bool) error {
	if !tagged(ctx) {
		fs, err := f.fs(ctx)
		if err != nil {
			return err
		}
		return fs.Remove(ctx, path, recursive)
	}
	a := FileArgs{Path: CleanPath(path), Recursive: recursive}
	_, err := f.step(ctx, stepSpec{op: OpRemove, sandbox: f.id, args: a},
		func(ctx context.Context, fs session.FS) (Outcome, error) {
			return Outcome{}, fs.Remove(ctx, path, recursive)
		})
	return err
}

// The rest are never steps.

func (f *stepFS) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	fs, err := f.fs(ctx)
	if err != nil {
		return api.FileInfo{}, err
	}
	return fs.Stat(ctx, path)
}

func (f *stepFS) List(ctx context.Context, path string) ([]api.FileInfo, error) {
	fs, err := f.fs(ctx)
	if err != nil {
		return nil, err
	}
	return fs.List(ctx, path)
}

func (f *stepFS) Rename(ctx context.Context, from, to string) error {
	fs, err := f.fs(ctx)
	if err != nil {
		return err
	}
	return fs.Rename(ctx, from, to)
}

func (f *stepFS) WriteTar(ctx context.Context, path string, w io.Writer) error {
	fs, err := f.fs(ctx)
	if err != nil {
		return err
	}
	return fs.WriteTar(ctx, path, w)
}
