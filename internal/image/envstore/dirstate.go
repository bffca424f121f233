package envstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DirState keeps the state in a directory: DIR/envs/NAME.json (manifests) and
// DIR/layers/NAME.json (the layer index), one file each, written atomically
// (temp file and rename). Conditional writes and removals hold an flock on
// DIR/.lock, so the CLI and a server on the same directory do not race.
type DirState struct{ Dir string }

var _ State = DirState{}

// OpenDir returns the state at dir (its directories created if missing).
func OpenDir(dir string) (DirState, error) {
	for _, d := range []string{"envs", "layers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return DirState{}, errdefs.Internal(err, "envstore %s", dir)
		}
	}
	return DirState{Dir: dir}, nil
}

func (d DirState) layerPath(name string) string { return filepath.Join(d.Dir, "layers", name+".json") }
func (d DirState) envPath(name string) string   { return filepath.Join(d.Dir, "envs", name+".json") }

// lock takes the directory's lock (exclusive: RemoveLayer) until the returned
// func.
func (d DirState) lock() (func(), error) { return flock(filepath.Join(d.Dir, ".lock"), unix.LOCK_EX) }

// lockEnv takes the directory's lock shared and environment name's own lock
// exclusive: writes of different environments go on at once (a rebase's
// fsyncs share journal commits), while RemoveLayer waits for them all.
func (d DirState) lockEnv(name string) (func(), error) {
	all, err := flock(filepath.Join(d.Dir, ".lock"), unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(d.Dir, ".locks"), 0o755); err != nil {
		all()
		return nil, errdefs.Internal(err, "envstore lock")
	}
	one, err := flock(filepath.Join(d.Dir, ".locks", name), unix.LOCK_EX)
	if err != nil {
		all()
		return nil, err
	}
	return func() { one(); all() }, nil
}

func flock(p string, how int) (func(), error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errdefs.Internal(err, "envstore lock")
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, errdefs.Internal(err, "envstore lock")
	}
	return func() { f.Close() }, nil // closing drops the lock
}

// fileVersion is the version of a file's content (never 0).
func fileVersion(b []byte) Version {
	h := sha256.Sum256(b)
	return Version(binary.BigEndian.Uint64(h[:8])>>1 | 1)
}

// Layer implements State.
func (d DirState) Layer(ctx context.Context, name string) (NamedLayer, Version, error) {
	var l NamedLayer
	b, err := os.ReadFile(d.layerPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return l, 0, layerNotFound(name)
	}
	if err == nil {
		err = json.Unmarshal(b, &l)
	}
	if err != nil {
		return l, 0, errdefs.Internal(err, "read layer %q", name)
	}
	return l, fileVersion(b), nil
}

// Layers implements State.
func (d DirState) Layers(ctx context.Context) ([]NamedLayer, error) {
	names, err := listNames(filepath.Join(d.Dir, "layers"))
	if err != nil {
		return nil, err
	}
	out := make([]NamedLayer, 0, len(names))
	for _, n := range names {
		if l, _, err := d.Layer(ctx, n); err == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// PutLayer implements State.
func (d DirState) PutLayer(ctx context.Context, l NamedLayer) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	b, err := json.MarshalIndent(l, "", "  ")
	if err == nil {
		err = image.WriteFileAtomic(d.layerPath(l.Name), append(b, '\n'))
	}
	if err != nil {
		return errdefs.Internal(err, "write layer %q", l.Name)
	}
	return nil
}

// RemoveLayer implements State.
func (d DirState) RemoveLayer(ctx context.Context, name string) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	l, _, err := d.Layer(ctx, name)
	if err != nil {
		return err
	}
	names, err := d.EnvNames(ctx)
	if err != nil {
		return err
	}
	envs := make([]image.Manifest, 0, len(names))
	for _, n := range names {
		if e, _, err := d.Env(ctx, n); err == nil {
			envs = append(envs, e)
		}
	}
	if env, ok := usedBy(envs, l); ok {
		return layerInUse(name, env)
	}
	if err := os.Remove(d.layerPath(name)); err != nil {
		return errdefs.Internal(err, "remove layer %q", name)
	}
	return nil
}

// Env implements State.
func (d DirState) Env(ctx context.Context, name string) (image.Manifest, Version, error) {
	b, err := os.ReadFile(d.envPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return image.Manifest{}, 0, envNotFound(name)
	}
	if err != nil {
		return image.Manifest{}, 0, errdefs.Internal(err, "read environment %q", name)
	}
	m, err := image.ParseManifest(b)
	if err != nil {
		return m, 0, errdefs.Internal(err, "read environment %q", name)
	}
	m.Name = name
	return m, fileVersion(b), nil
}

// EnvNames implements State.
func (d DirState) EnvNames(ctx context.Context) ([]string, error) {
	return listNames(filepath.Join(d.Dir, "envs"))
}

// PutEnv implements State.
func (d DirState) PutEnv(ctx context.Context, m image.Manifest, cond Cond) (int, error) {
	b, err := m.Marshal()
	if err != nil {
		return 0, errdefs.Internal(err, "environment %q", m.Name)
	}
	unlock, err := d.lockEnv(m.Name)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if !cond.Any {
		_, v, err := d.Env(ctx, m.Name)
		if err != nil && errdefs.CodeOf(err) != api.CodeNotFound {
			return 0, err
		}
		if v != cond.Version {
			return 0, ErrChanged
		}
	}
	for n, want := range cond.Layers {
		if _, v, err := d.Layer(ctx, n); err != nil || v != want {
			return 0, ErrChanged
		}
	}
	if err := image.WriteFileAtomic(d.envPath(m.Name), b); err != nil {
		return 0, errdefs.Internal(err, "write environment %q", m.Name)
	}
	return len(b), nil
}

// RemoveEnv implements State.
func (d DirState) RemoveEnv(ctx context.Context, name string) error {
	unlock, err := d.lockEnv(name)
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(d.envPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return envNotFound(name)
	}
	if err != nil {
		return errdefs.Internal(err, "remove environment %q", name)
	}
	return nil
}

func listNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.Internal(err, "list %s", dir)
	}
	out := []string{}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}
