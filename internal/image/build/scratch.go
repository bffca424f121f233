package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/hostfs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A stage FROM scratch has no image to run a sandbox of, and nothing to run
// in one: its file system is a directory on this host (state.tree) that
// COPY and ADD (from the context or --from a stage) write through the same
// session.FS a sandbox offers, resolved inside the tree as in a sandbox. Each
// layer step packs the whole tree as the stage's one layer (a stage FROM
// scratch has no lower layer to diff against), cached under the step's key
// like any layer step; a cache hit still applies the step to the tree (a
// local copy) so that a later step that misses has the files, and packs
// nothing. RUN needs a shell and is refused.

// workspace is where a layer step changes the file system: a sandbox (id)
// or a scratch stage's tree (id "").
type workspace struct {
	id string
	fs func(ctx context.Context) (session.FS, error)
}

func (r *run) sandboxWorkspace(id string) workspace {
	return workspace{id: id, fs: func(ctx context.Context) (session.FS, error) { return r.b.Sandboxes.FS(ctx, id) }}
}

func treeWorkspace(dir string) workspace {
	return workspace{fs: func(context.Context) (session.FS, error) { return treeFS(dir) }}
}

// treeFS opens a scratch stage's tree as a sandbox's file system.
func treeFS(dir string) (session.FS, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, errdefs.Internal(err, "open the scratch stage's tree")
	}
	return hostfs.New(fsops.New(f)), nil
}

// fromScratch starts a stage FROM scratch: an empty tree.
func (r *run) fromScratch(ctx context.Context, line int) (*state, error) {
	dir, err := r.newTree()
	if err != nil {
		return nil, err
	}
	// As docker build, a stage FROM scratch has the default PATH.
	st := &state{tree: dir, args: map[string]string{}, shell: []string{"/bin/sh", "-c"},
		cfg: image.Config{Env: []string{"PATH=" + DefaultPath}}}
	st.key = st.chain("FROM scratch")
	return st, nil
}

// DefaultPath is the PATH docker build gives a stage FROM scratch.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// newTree makes an empty tree, removed when the build ends.
func (r *run) newTree() (string, error) {
	dir, err := os.MkdirTemp(r.b.TempDir, "dsec-scratch-")
	if err != nil {
		return "", errdefs.Internal(err, "scratch stage tree")
	}
	r.trees = append(r.trees, dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", errdefs.Internal(err, "scratch stage tree")
	}
	return dir, nil
}

// copyTree copies a scratch stage's tree for a stage FROM it.
func (r *run) copyTree(ctx context.Context, src string) (string, error) {
	dst, err := r.newTree()
	if err != nil {
		return "", err
	}
	from, err := treeFS(src)
	if err != nil {
		return "", err
	}
	defer from.Close()
	to, err := treeFS(dst)
	if err != nil {
		return "", err
	}
	defer to.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(from.WriteTar(ctx, "/", pw)) }()
	err = to.ExtractTar(ctx, "/", pr)
	pr.CloseWithError(io.ErrClosedPipe)
	return dst, err
}

func (r *run) removeTrees() {
	for _, d := range r.trees {
		if err := os.RemoveAll(d); err != nil {
			r.b.log().Warn("remove a scratch stage's tree", "dir", d, "err", err)
		}
	}
}

// stageFS opens the file system of an earlier stage src for COPY --from:
// its tree, or a sandbox of it (deleted when the returned FS is closed).
func (r *run) stageFS(ctx context.Context, src *state, from string, line int) (session.FS, error) {
	if src.tree != "" {
		return treeFS(src.tree)
	}
	sb, err := r.b.Sandboxes.Create(ctx, api.CreateSandboxRequest{Backend: r.backend(), Image: src.from,
		Labels: map[string]string{"dsec.build": r.req.Name}, RegistryAuth: r.req.RegistryAuth})
	if err != nil {
		return nil, fmt.Errorf("Dockerfile line %d: sandbox of stage %s: %w", line, from, err)
	}
	fsys, err := r.b.Sandboxes.FS(ctx, sb.ID)
	if err != nil {
		r.deleteSandbox(ctx, sb.ID)
		return nil, err
	}
	return sandboxFS{FS: fsys, done: func() { r.deleteSandbox(ctx, sb.ID) }}, nil
}

// sandboxFS is a sandbox's file system whose Close also deletes the sandbox.
type sandboxFS struct {
	session.FS
	done func()
}

func (s sandboxFS) Close() error {
	err := s.FS.Close()
	s.done()
	return err
}

// treeStep is layerStep for a scratch stage: fn changes the tree, and the
// tree becomes the stage's one layer (the cache's, or packed now).
func (r *run) treeStep(ctx context.Context, st *state, key [32]byte, step *api.BuildStep, fn func(ctx context.Context, w workspace) error) error {
	w := treeWorkspace(st.tree)
	if err := r.mkWorkdir(ctx, st, w, step.Line); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(ctx, w); err != nil {
			return err
		}
	}
	name := cacheName(key)
	r.res.LayerSteps++
	r.pin(name)
	if m, ok := r.cached(ctx, name); ok {
		r.res.CacheHits++
		step.Cached = true
		r.b.touch(name)
		advance(st, key, name, m, step)
		return nil
	}
	if r.b.Envs.Blobs == nil {
		return errdefs.New(api.CodeInternal, "a build FROM scratch needs the node's blob store")
	}
	res, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: st.tree}, r.b.Envs.Blobs, layer.Options{TempDir: r.b.TempDir})
	if err != nil {
		return fmt.Errorf("Dockerfile line %d: pack the stage's files: %w", step.Line, err)
	}
	l := res.Layer
	l.Dir, l.Role = "", ""
	m := image.Manifest{Name: name, Description: "a build step FROM scratch", Layers: []image.Layer{l},
		BlobStore: r.b.Envs.Spec, Created: time.Now().UTC()}
	image.Roles(m.Layers, false)
	if _, err := r.b.Envs.State.PutEnv(ctx, m, envstore.Cond{Any: true}); err != nil {
		return fmt.Errorf("Dockerfile line %d: record the step: %w", step.Line, err)
	}
	r.b.touch(name)
	advance(st, key, name, m, step)
	return nil
}
