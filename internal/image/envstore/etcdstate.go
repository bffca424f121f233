package envstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// EtcdState keeps the state in etcd, so that every node and API server of a
// cluster sees one set of environments. Layout under the cluster's prefix
// (default "/dsec/"):
//
//	env/NAME          an environment's manifest (images.Manifest JSON)
//	layer/NAME        a layer index entry (NamedLayer JSON)
//	envuse/NAME/NODE  node NODE runs (or is creating) sandboxes on environment
//	                  NAME: RemoveEnv is refused while any such key exists
//
// Versions are mod revisions. Conditional writes and removals are single etcd
// transactions (compares and the write together), never read-then-write.
type EtcdState struct {
	cli    *clientv3.Client
	prefix string
}

var _ State = (*EtcdState)(nil)

// NewEtcdState returns the state under prefix ("" = "/dsec/") of etcd cli.
func NewEtcdState(cli *clientv3.Client, prefix string) *EtcdState {
	if prefix == "" {
		prefix = "/dsec/"
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &EtcdState{cli: cli, prefix: prefix}
}

func (s *EtcdState) envs() string                { return s.prefix + "env/" }
func (s *EtcdState) env(name string) string      { return s.envs() + name }
func (s *EtcdState) layers() string              { return s.prefix + "layer/" }
func (s *EtcdState) layer(name string) string    { return s.layers() + name }
func (s *EtcdState) uses(env string) string      { return s.prefix + "envuse/" + env + "/" }
func (s *EtcdState) use(env, node string) string { return s.uses(env) + node }

// unavailable classifies an etcd failure: the state store did not answer.
func unavailable(err error, what string, args ...any) error {
	if errdefs.CodeOf(err) != api.CodeInternal { // a cancelled or timed-out call
		return err
	}
	return errdefs.Wrap(api.CodeUnavailable, err, "environment store (etcd): "+what, args...)
}

// Layer implements State.
func (s *EtcdState) Layer(ctx context.Context, name string) (NamedLayer, Version, error) {
	var l NamedLayer
	r, err := s.cli.Get(ctx, s.layer(name))
	if err != nil {
		return l, 0, unavailable(err, "read layer %q", name)
	}
	if len(r.Kvs) == 0 {
		return l, 0, layerNotFound(name)
	}
	if err := json.Unmarshal(r.Kvs[0].Value, &l); err != nil {
		return l, 0, errdefs.Internal(err, "layer %q", name)
	}
	return l, Version(r.Kvs[0].ModRevision), nil
}

// Layers implements State.
func (s *EtcdState) Layers(ctx context.Context) ([]NamedLayer, error) {
	r, err := s.cli.Get(ctx, s.layers(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, unavailable(err, "list layers")
	}
	out := make([]NamedLayer, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var l NamedLayer
		if json.Unmarshal(kv.Value, &l) == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// PutLayer implements State.
func (s *EtcdState) PutLayer(ctx context.Context, l NamedLayer) error {
	b, err := json.Marshal(l)
	if err != nil {
		return errdefs.Internal(err, "layer %q", l.Name)
	}
	if _, err := s.cli.Put(ctx, s.layer(l.Name), string(b)); err != nil {
		return unavailable(err, "write layer %q", l.Name)
	}
	return nil
}

// retries bounds the optimistic loops (each retry means another writer won).
const retries = 20

// RemoveLayer implements State: the layer and every environment are read at
// one revision; the delete commits only if the layer is unchanged and no
// environment was written since (a compose that raced it makes it read again).
func (s *EtcdState) RemoveLayer(ctx context.Context, name string) error {
	for range retries {
		l, v, err := s.Layer(ctx, name)
		if err != nil {
			return err
		}
		r, err := s.cli.Get(ctx, s.envs(), clientv3.WithPrefix())
		if err != nil {
			return unavailable(err, "list environments")
		}
		envs := make([]image.Manifest, 0, len(r.Kvs))
		for _, kv := range r.Kvs {
			if m, err := image.ParseManifest(kv.Value); err == nil {
				m.Name = strings.TrimPrefix(string(kv.Key), s.envs())
				envs = append(envs, m)
			}
		}
		if env, ok := usedBy(envs, l); ok {
			return layerInUse(name, env)
		}
		t, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.layer(name)), "=", int64(v)),
			clientv3.Compare(clientv3.ModRevision(s.envs()).WithPrefix(), "<", r.Header.Revision+1),
		).Then(clientv3.OpDelete(s.layer(name))).Commit()
		if err != nil {
			return unavailable(err, "remove layer %q", name)
		}
		if t.Succeeded {
			return nil
		}
	}
	return errdefs.Conflict("remove layer %q: the environments kept changing; try again", name)
}

// Env implements State.
func (s *EtcdState) Env(ctx context.Context, name string) (image.Manifest, Version, error) {
	r, err := s.cli.Get(ctx, s.env(name))
	if err != nil {
		return image.Manifest{}, 0, unavailable(err, "read environment %q", name)
	}
	if len(r.Kvs) == 0 {
		return image.Manifest{}, 0, envNotFound(name)
	}
	m, err := image.ParseManifest(r.Kvs[0].Value)
	if err != nil {
		return m, 0, errdefs.Internal(err, "environment %q", name)
	}
	m.Name = name
	return m, Version(r.Kvs[0].ModRevision), nil
}

// EnvNames implements State.
func (s *EtcdState) EnvNames(ctx context.Context) ([]string, error) {
	r, err := s.cli.Get(ctx, s.envs(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, unavailable(err, "list environments")
	}
	out := make([]string, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), s.envs()))
	}
	sort.Strings(out)
	return out, nil
}

// PutEnv implements State: one transaction comparing the environment's and
// the layers' mod revisions and writing the manifest.
func (s *EtcdState) PutEnv(ctx context.Context, m image.Manifest, cond Cond) (int, error) {
	b, err := m.Marshal()
	if err != nil {
		return 0, errdefs.Internal(err, "environment %q", m.Name)
	}
	var cmps []clientv3.Cmp
	if !cond.Any {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.env(m.Name)), "=", int64(cond.Version)))
	}
	for n, v := range cond.Layers {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.layer(n)), "=", int64(v)))
	}
	t, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(s.env(m.Name), string(b))).Commit()
	if err != nil {
		return 0, unavailable(err, "write environment %q", m.Name)
	}
	if !t.Succeeded {
		return 0, ErrChanged
	}
	return len(b), nil
}

// RemoveEnv implements State: deleted in one transaction that also checks no
// node marks the environment in use (MarkUse).
func (s *EtcdState) RemoveEnv(ctx context.Context, name string) error {
	t, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(s.env(name)), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(s.uses(name)).WithPrefix(), "=", 0),
	).Then(clientv3.OpDelete(s.env(name))).Else(
		clientv3.OpGet(s.env(name), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.uses(name), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return unavailable(err, "remove environment %q", name)
	}
	if t.Succeeded {
		return nil
	}
	if len(t.Responses[0].GetResponseRange().Kvs) == 0 {
		return envNotFound(name)
	}
	var nodes []string
	for _, kv := range t.Responses[1].GetResponseRange().Kvs {
		nodes = append(nodes, strings.TrimPrefix(string(kv.Key), s.uses(name)))
	}
	return errdefs.Conflict("environment %q is in use by sandboxes on node(s) %s", name, strings.Join(nodes, ", "))
}

// MarkUse records that node runs, or is about to create, sandboxes on
// environment env, in one transaction with the check that env exists: a
// RemoveEnv either happened before (false: no such environment) or is refused
// from now on. The mark stays (it has no lease: a lost node's sandboxes
// come back) until UnmarkUse.
func (s *EtcdState) MarkUse(ctx context.Context, env, node string) (bool, error) {
	t, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.env(env)), ">", 0)).
		Then(clientv3.OpPut(s.use(env, node), time.Now().UTC().Format(time.RFC3339))).Commit()
	if err != nil {
		return false, unavailable(err, "mark environment %q in use", env)
	}
	return t.Succeeded, nil
}

// UnmarkUse drops node's mark on env.
func (s *EtcdState) UnmarkUse(ctx context.Context, env, node string) error {
	if _, err := s.cli.Delete(ctx, s.use(env, node)); err != nil {
		return unavailable(err, "unmark environment %q", env)
	}
	return nil
}

// MarkedBy returns the environments node marks in use.
func (s *EtcdState) MarkedBy(ctx context.Context, node string) ([]string, error) {
	base := s.prefix + "envuse/"
	r, err := s.cli.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, unavailable(err, "list marks")
	}
	var out []string
	for _, kv := range r.Kvs {
		env, n, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), base), "/")
		if ok && n == node {
			out = append(out, env)
		}
	}
	return out, nil
}

// String names the state for messages.
func (s *EtcdState) String() string { return fmt.Sprintf("etcd %s", s.prefix) }
