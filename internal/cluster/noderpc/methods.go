package noderpc

import (
	"context"
	"encoding/json"
	"os"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
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
	Deadline  *api.DeadlineRequest      `json:"deadline,omitempty"`
	ProcInput *api.ProcessInput         `json:"proc_input,omitempty"`
	Follow    *api.FollowRequest        `json:"follow,omitempty"`
	Watch     *api.WatchRequest         `json:"watch,omitempty"`
	WatchID   string                    `json:"watch_id,omitempty"`
	FnCall    *api.FnCallRequest        `json:"fncall,omitempty"`
	Input     *api.InputRequest         `json:"input,omitempty"`
	HTTP      *httpCall                 `json:"http,omitempty"`
	IDs       []string                  `json:"ids,omitempty"`
	Usage     *api.UsageHistoryRequest  `json:"usage,omitempty"`
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
	"SendProcessInput": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return nil, h.svc.SendProcessInput(ctx, a.ID, a.Proc, val(a.ProcInput))
	},
	"FollowProcess": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.FollowProcess(ctx, a.ID, a.Proc, val(a.Follow))
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
	"Fork": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Fork(ctx, a.ID, val(a.Fork))
	},
	"Commit": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Commit(ctx, a.ID, val(a.Commit))
	},
	"SetNetwork": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.SetNetwork(ctx, a.ID, val(a.Network))
	},
	"PauseWith": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.PauseWith(ctx, a.ID, val(a.Pause))
	},
	"CreateWatch": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.CreateWatch(ctx, a.ID, val(a.Watch))
	},
	"WatchEvents": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.WatchEvents(ctx, a.ID, a.WatchID)
	},
	"RemoveWatch": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return nil, h.svc.RemoveWatch(ctx, a.ID, a.WatchID)
	},
	"SetDeadline": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.SetDeadline(ctx, a.ID, val(a.Deadline))
	},
	"SetCPUClass": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.SetCPUClass(ctx, a.ID, a.Class)
	},
	"FnCall": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.FnCall(ctx, val(a.FnCall))
	},
	"Images": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Images(ctx)
	},
	"Image": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Image(ctx, a.ID)
	},
	"RecordImage": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.RecordImage(ctx, a.ID)
	},
	"PruneBuildCache": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.PruneBuildCache(ctx)
	},
	"ImagePulls": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.ImagePulls(ctx, a.ID)
	},
	"UsageHistory": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.UsageHistory(ctx, a.ID, val(a.Usage))
	},
	"Screenshot": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.Screenshot(ctx, a.ID)
	},
	"HTTP": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return serveHTTPStep(ctx, h.svc, a)
	},
	"SendInput": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.SendInput(ctx, a.ID, val(a.Input))
	},
	"ListTrajectories": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.ListTrajectories(ctx)
	},
	"GetTrajectory": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.GetTrajectory(ctx, a.ID)
	},
	"DeleteTrajectory": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return nil, h.svc.DeleteTrajectory(ctx, a.ID)
	},
	"RebuildTrajectory": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		return h.svc.RebuildTrajectory(ctx, a.ID)
	},
	"NodeStatus": func(ctx context.Context, h *handler, a callArgs) (any, error) { return h.status(ctx) },
	"SandboxUsage": func(ctx context.Context, h *handler, a callArgs) (any, error) {
		if len(a.IDs) > MaxUsageIDs {
			return nil, errdefs.Invalid("node rpc SandboxUsage: at most %d IDs, got %d", MaxUsageIDs, len(a.IDs))
		}
		return h.svc.SandboxUsage(ctx, a.IDs)
	},
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
