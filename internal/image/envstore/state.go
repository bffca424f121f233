package envstore

import (
	"context"
	"errors"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// State is where a Store keeps its environments and its layer index: a local
// directory (DirState: `dsec server`, and `dsec image` without --etcd) or etcd
// (EtcdState: a cluster, where one compose serves every node). The blobs
// themselves stay in the blob store (internal/image/blob).
//
// Each method is atomic on its own. A read-modify-write goes through
// versions: Env and Layer return the version they read, and PutEnv writes
// only if the versions in its Cond still hold (else ErrChanged, and the
// caller reads again). Both implementations pass one conformance suite
// (envstore_test's TestState).
type State interface {
	// Layer returns a layer index entry and its version (not_found if none).
	Layer(ctx context.Context, name string) (NamedLayer, Version, error)
	// Layers returns every layer index entry, sorted by name.
	Layers(ctx context.Context) ([]NamedLayer, error)
	// PutLayer records l under l.Name, replacing an older entry.
	PutLayer(ctx context.Context, l NamedLayer) error
	// RemoveLayer deletes layer name: not_found if none, conflict while an
	// environment references it (checked in the same atomic step, so a
	// concurrent compose either sees the layer or fails).
	RemoveLayer(ctx context.Context, name string) error

	// Env returns environment name (in the current manifest form) and its
	// version (not_found if none).
	Env(ctx context.Context, name string) (image.Manifest, Version, error)
	// EnvNames returns the environment names, sorted.
	EnvNames(ctx context.Context) ([]string, error)
	// PutEnv writes m under m.Name if cond holds, else ErrChanged; it
	// returns the bytes written.
	PutEnv(ctx context.Context, m image.Manifest, cond Cond) (int, error)
	// RemoveEnv deletes environment name: not_found if none, conflict while a
	// node of the cluster marks it in use (EtcdState; a DirState leaves that
	// check to the Store's InUse).
	RemoveEnv(ctx context.Context, name string) error
}

// Version identifies what a State read (etcd: the key's mod revision; a
// directory: a hash of the file). 0 means absent.
type Version int64

// Cond is the condition of a PutEnv.
type Cond struct {
	// Any writes whatever the environment's current version (compose replaces).
	Any bool
	// Version is the version the environment must still have (0: it must not
	// exist). Ignored when Any.
	Version Version
	// Layers are layer index entries the manifest was resolved from: each must
	// still have its version (a layer renamed or removed meanwhile fails the
	// write).
	Layers map[string]Version
}

// ErrChanged is PutEnv's answer when its condition no longer holds: something
// changed the environment (or a layer it was resolved from) since it was read.
var ErrChanged = errdefs.New(api.CodeConflict, "the environment or a layer it names changed meanwhile")

func isChanged(err error) bool { return errors.Is(err, ErrChanged) }

// usedBy returns the first environment of envs that references layer l (by
// its name, or by its digest with no other name), if any.
func usedBy(envs []image.Manifest, l NamedLayer) (string, bool) {
	for _, e := range envs {
		for _, r := range e.Layers {
			if r.Digest == l.Digest && (r.Name == "" || r.Name == l.Name) {
				return e.Name, true
			}
		}
	}
	return "", false
}

// layerInUse is RemoveLayer's conflict.
func layerInUse(name, env string) error {
	return errdefs.Conflict("layer %q is used by environment %q", name, env)
}

func layerNotFound(name string) error {
	return errdefs.NotFound("layer %q not found (build it with `dsec image build --name %s`)", name, name)
}

func envNotFound(name string) error { return errdefs.NotFound("environment %q not found", name) }
