package node

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// What a cluster node adds to the node: environments marked in use in etcd
// (envstore.Uses) around creates and deletes, and FnCall admission.

// usesSyncInterval is how often a cluster node drops the in-use marks of
// environments whose sandboxes ended on their own (TTL, idle timeout).
const usesSyncInterval = 5 * time.Second

// fnCallRetryAfter is the Retry-After of a FnCall refused for lack of room.
const fnCallRetryAfter = time.Second

// Create implements session.Service: on a cluster node the environment is
// marked in use in etcd before the agent resolves it, so no `dsec image rm`
// anywhere can remove it under the create.
func (n node) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if n.uses == nil || req.Image == "" || n.dirImage(req.Image) || image.IsReference(req.Image) {
		// The default, a directory image or a registry reference: not in etcd.
		return n.Manager.Create(ctx, req)
	}
	done, err := n.uses.Begin(ctx, req.Image)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer done()
	return n.Manager.Create(ctx, req)
}

// Delete implements session.Service: a cluster node drops the mark of an
// environment its last sandbox just left.
func (n node) Delete(ctx context.Context, id string) error {
	err := n.Manager.Delete(ctx, id)
	if err == nil && n.uses != nil {
		n.uses.Sync(ctx, n.usedEnvs())
	}
	return err
}

// dirImage reports whether name is a directory image (which hides an
// environment of the same name).
func (n node) dirImage(name string) bool {
	if !image.ValidName.MatchString(name) {
		return false
	}
	_, err := os.Stat(filepath.Join(n.imagesDir, name, image.ManifestFile))
	return err == nil
}

// usedEnvs returns the environments this node's sandboxes run on.
func (n node) usedEnvs() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := n.Manager.List(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, sb := range list {
		if sb.Image != "" && !n.dirImage(sb.Image) && !image.IsReference(sb.Image) {
			out = append(out, sb.Image)
		}
	}
	return out
}

// Info implements session.Service: the agent's info, and the FnCall group
// unless the node leaves it out (--no-fncall).
func (n node) Info(ctx context.Context) (api.Info, error) {
	info, err := n.Manager.Info(ctx)
	if err != nil || n.noFnCall {
		return info, err
	}
	return session.WithServices(info, api.ServiceFnCall), nil
}

// FnCall implements session.FnCalls: at most MaxFnCalls at once; one more
// is resource_exhausted with Retry-After (a cluster places it elsewhere).
func (n node) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	if n.noFnCall {
		return api.FnCallResult{}, errdefs.New(api.CodeNotImplemented, "FnCall is off on node %s (--no-fncall)", n.Manager.Node())
	}
	if err := n.gpuDevice(&req); err != nil {
		return api.FnCallResult{}, err
	}
	if n.fnSlots != nil {
		select {
		case n.fnSlots <- struct{}{}:
			defer func() { <-n.fnSlots }()
		default:
			return api.FnCallResult{}, errdefs.Exhausted(fnCallRetryAfter, "node %s runs %d FnCalls already (--max-fncalls)", n.Manager.Node(), cap(n.fnSlots))
		}
	}
	return n.fc.Call(ctx, req)
}

// FnCallLoad returns the FnCalls this node runs now and the most it takes at
// once (0: unbounded), for its cluster record.
func (d *Daemon) FnCallLoad() (inFlight, capacity int) {
	if d.node.fnSlots == nil {
		return 0, 0
	}
	return len(d.node.fnSlots), cap(d.node.fnSlots)
}

// FnCallEnabled reports whether the node serves FnCalls.
func (d *Daemon) FnCallEnabled() bool { return !d.node.noFnCall }

// Image implements the node RPC's image description (GET /v1/images/{name}
// through an API server): this node's view, with its layer accounting.
func (s nodeService) Image(ctx context.Context, name string) (api.Image, error) {
	return s.node.Image(ctx, name)
}

// RecordImage implements the node RPC's record (POST /v1/images/{name}/record
// through an API server): this node's access lists become the prefetch lists.
func (s nodeService) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return s.node.RecordImage(ctx, name)
}

// MountedLayers returns the digests of the layers layerd has mounted on this
// node (none while layerd is not running), for image locality in placement.
func (d *Daemon) MountedLayers(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Second) // never hold up the node's report
	defer cancel()
	st, err := d.Layers.Stats(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range st.Layers {
		if l.Mounted {
			out = append(out, l.Digest)
		}
	}
	return out
}
