package noderpc

import (
	"context"
	"encoding/json"
	"os"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// callArgs are the arguments of every unary method (Call); each method reads
// the fields it needs.
type callArgs struct {
	ID        string                    `json:"id,omitempty"`
	Proc      string                    `json:"proc,omitempty"`
	Signal    int                       `json:"signal,omitempty"`
	Path      string                    `json:"path,omitempty"`
	To        string                    `json:"to,omitempty"`
	Mode      uint32                    `json:"mode,omitempty"`
	Parents   bool                      `json:"parents,omitempty"`
	Recursive bool                      `json:"recursive,omitempty"`
	Class     string                    `json:"class,omitempty"`
	Create    *api.CreateSandboxRequest `json:"create,omitempty"`
	Exec      *api.ExecRequest          `json:"exec,omitempty"`
	Fork      *api.ForkRequest          `json:"fork,omitempty"`
	Commit    *api.CommitRequest        `json:"commit,omitempty"`
	Network   *api.NetworkPolicy        `json:"network,omitempty"`
	Pause     *api.PauseRequest         `json:"pause,omitempty"`
	FnCall    *api.FnCallRequest        `json:"fncall,omitempty"`
	Input     *api.InputRequest         `json:"input,omitempty"`
	HTTP      *httpCall                 `json:"http,omitempty"`
	IDs       []string                  `json:"ids,omitempty"`
}

// ImageDescriber describes a node's images and environments with the node's
// own layer accounting (what was mounted and fetched there).
type ImageDescriber interface {
	Images(ctx context.Context) ([]api.Image, error)
	Image(ctx context.Context, name string) (api.Image, error)
}

// ImageRecorder stores the chunks a node's sandboxes read from an
// environment's layers as their prefetch lists.
type ImageRecorder interface {
	RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error)
}

// val is *p, or T's zero value for nil.
func val[T any](p *T) T {
	if p == nil {
		var z T
		return z
	}
	return *p
}

// pingMethod is the liveness probe's method.
const pingMethod = "Ping"

// method runs one unary operation on the handler's service.
type method func(ctx context.Context, h *handler, a callArgs) (any, error)

// methods are the unary operations Call serves, by name.
var methods = map[string]method{
	// Ping answers at once: a client's liveness probe (Client.watch).
	pingMethod: func(context.Context, *handler, callArgs) (any, error) { return nil, nil },
	"Info":     func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.Info(ctx) },
	"Create": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Create(ctx, val(a.Create))
	},
	"Get":  func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.Get(ctx, a.ID) },
	"List": func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.List(ctx) },
	"Delete": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return nil, h.svc.Delete(ctx, a.ID)
	},
	"Pause":  func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.Pause(ctx, a.ID) },
	"Resume": func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.Resume(ctx, a.ID) },
	"Reset":  func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.svc.Reset(ctx, a.ID) },
	"Exec": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Exec(ctx, a.ID, val(a.Exec))
	},
	"StartProcess": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.StartProcess(ctx, a.ID, val(a.Exec))
	},
	"ListProcesses": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.ListProcesses(ctx, a.ID)
	},
	"GetProcess": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.GetProcess(ctx, a.ID, a.Proc)
	},
	"WaitProcess": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.WaitProcess(ctx, a.ID, a.Proc)
	},
	"KillProcess": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return nil, h.svc.KillProcess(ctx, a.ID, a.Proc, a.Signal)
	},
	// FSOpen checks that the sandbox's file system opens (Client.FS); every
	// other file operation opens it again on its own.
	"FSOpen": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) { return nil, nil }),
	"Stat": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) {
		return fs.Stat(ctx, a.Path)
	}),
	"ListFiles": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) {
		return fs.List(ctx, a.Path)
	}),
	"Mkdir": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) {
		return fs.Mkdir(ctx, a.Path, os.FileMode(a.Mode), a.Parents)
	}),
	"Remove": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) {
		return nil, fs.Remove(ctx, a.Path, a.Recursive)
	}),
	"Rename": fsMethod(func(ctx context.Context, fs session.FS, a callArgs) (any, error) {
		return nil, fs.Rename(ctx, a.Path, a.To)
	}),
	"Fork": capMethod("fork", func(ctx context.Context, f session.Forker, a callArgs) (any, error) {
		return f.Fork(ctx, a.ID, val(a.Fork))
	}),
	"Commit": capMethod("commit", func(ctx context.Context, c session.Committer, a callArgs) (any, error) {
		return c.Commit(ctx, a.ID, val(a.Commit))
	}),
	"SetNetwork": capMethod("network policies", func(ctx context.Context, n session.Networker, a callArgs) (any, error) {
		return n.SetNetwork(ctx, a.ID, val(a.Network))
	}),
	"PauseWith": capMethod("pause with reclaim", func(ctx context.Context, q session.QoS, a callArgs) (any, error) {
		return q.PauseWith(ctx, a.ID, val(a.Pause))
	}),
	"SetCPUClass": capMethod("CPU classes", func(ctx context.Context, q session.QoS, a callArgs) (any, error) {
		return q.SetCPUClass(ctx, a.ID, a.Class)
	}),
	"FnCall": capMethod("FnCall", func(ctx context.Context, f session.FnCaller, a callArgs) (any, error) {
		return f.FnCall(ctx, val(a.FnCall))
	}),
	"Images": capMethod("images", func(ctx context.Context, il ImageDescriber, a callArgs) (any, error) {
		return il.Images(ctx)
	}),
	"Image": capMethod("images", func(ctx context.Context, il ImageDescriber, a callArgs) (any, error) {
		return il.Image(ctx, a.ID)
	}),
	"RecordImage": capMethod("prefetch recording", func(ctx context.Context, r ImageRecorder, a callArgs) (any, error) {
		return r.RecordImage(ctx, a.ID)
	}),
	"Screenshot": capMethod("screenshots", func(ctx context.Context, sc session.Screenshotter, a callArgs) (any, error) {
		return sc.Screenshot(ctx, a.ID)
	}),
	"HTTP": capMethod("HTTP steps", func(ctx context.Context, d session.HTTPDoer, a callArgs) (any, error) {
		return serveHTTPStep(ctx, d, a)
	}),
	"SendInput": capMethod("input", func(ctx context.Context, in session.InputSender, a callArgs) (any, error) {
		return in.SendInput(ctx, a.ID, val(a.Input))
	}),
	"ListTrajectories": capMethod("trajectories", func(ctx context.Context, t trajectory.API, a callArgs) (any, error) {
		return t.ListTrajectories(ctx)
	}),
	"GetTrajectory": capMethod("trajectories", func(ctx context.Context, t trajectory.API, a callArgs) (any, error) {
		return t.GetTrajectory(ctx, a.ID)
	}),
	"DeleteTrajectory": capMethod("trajectories", func(ctx context.Context, t trajectory.API, a callArgs) (any, error) {
		return nil, t.DeleteTrajectory(ctx, a.ID)
	}),
	"RebuildTrajectory": capMethod("trajectories", func(ctx context.Context, t trajectory.API, a callArgs) (any, error) {
		return t.RebuildTrajectory(ctx, a.ID)
	}),
	"NodeStatus": func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.status(ctx) },
	"SandboxUsage": capMethod("sandbox usage", func(ctx context.Context, u session.UsageReader, a callArgs) (any, error) {
		if len(a.IDs) > MaxUsageIDs {
			return nil, errdefs.Invalid("node rpc SandboxUsage: at most %d IDs, got %d", MaxUsageIDs, len(a.IDs))
		}
		return u.SandboxUsage(ctx, a.IDs)
	}),
}

// MaxUsageIDs bounds the IDs of one SandboxUsage call (none: every sandbox).
const MaxUsageIDs = 1000

// fsMethod runs f on the sandbox's file system, opened for this call.
func fsMethod(f func(ctx context.Context, fs session.FS, a callArgs) (any, error)) method {
	return func(ctx context.Context, h *handler, a callArgs) (any, error) {
		var out any
		err := h.withFS(ctx, a.ID, func(fs session.FS) error {
			var err error
			out, err = f(ctx, fs, a)
			return err
		})
		return out, err
	}
}

// capMethod runs f on the service's optional interface T; a service without it
// answers not_implemented (naming what).
func capMethod[T any](what string, f func(ctx context.Context, c T, a callArgs) (any, error)) method {
	return func(ctx context.Context, h *handler, a callArgs) (any, error) {
		c, ok := h.svc.(T)
		if !ok {
			return nil, lacks(what)
		}
		return f(ctx, c, a)
	}
}

// lacks is the answer for an optional capability the node's service does not have.
func lacks(what string) error {
	return errdefs.New(api.CodeNotImplemented, "this node does not serve %s", what)
}

// runMethod decodes a Call's arguments, runs it and encodes its answer.
func (h *handler) runMethod(ctx context.Context, name string, args []byte) ([]byte, error) {
	m, ok := methods[name]
	if !ok {
		return nil, errdefs.New(api.CodeNotImplemented, "node rpc: unknown method %q", name)
	}
	var a callArgs
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, errdefs.Invalid("node rpc %s: decoding arguments: %v", name, err)
		}
	}
	out, err := m(ctx, h, a)
	if err != nil || out == nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, errdefs.Internal(err, "node rpc %s: encoding the answer", name)
	}
	return b, nil
}
