package noderpc

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb/noderpcpbconnect"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxMessageBytes bounds one message a handler or client reads (a unary call's
// JSON; stream frames are at most chunkSize).
const maxMessageBytes = 32 << 20

// handler serves one session.Service as the Node RPC service.
type handler struct {
	noderpcpbconnect.UnimplementedNodeHandler
	svc  session.Service
	opts HandlerOptions
	log  *slog.Logger
	macs macCache
}

// NewHandler serves svc to Clients:
// mount h at path on an HTTP/2 server (NewServer). Every request must carry a
// token signed with opts.Secret.
func NewHandler(svc session.Service, opts HandlerOptions) (path string, h http.Handler) {
	if opts.MaxSkew <= 0 {
		opts.MaxSkew = DefaultMaxSkew
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	hd := &handler{svc: svc, opts: opts, log: opts.Logger}
	if hd.log == nil {
		hd.log = slog.Default()
	}
	icpts := []connect.Interceptor{&authInterceptor{h: hd}}
	if opts.Observer != nil { // outermost: refused requests count too
		icpts = append([]connect.Interceptor{observeInterceptor{obs: opts.Observer}}, icpts...)
	}
	path, rpc := noderpcpbconnect.NewNodeHandler(hd,
		connect.WithInterceptors(icpts...),
		connect.WithReadMaxBytes(maxMessageBytes),
		// No gzip: between nodes it costs more CPU than the bytes it saves
		// (it was a fifth of a unary call's CPU).
		connect.WithCompression("gzip", nil, nil))
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, unaryPrefix) {
			hd.serveUnary(w, r) // unary.go
			return
		}
		rpc.ServeHTTP(w, r)
	})
}

// Call implements the unary operations (methods.go) for Connect clients (of
// earlier versions: Client uses the plain path, unary.go).
func (h *handler) Call(ctx context.Context, req *connect.Request[noderpcpb.CallRequest]) (*connect.Response[noderpcpb.CallResponse], error) {
	out, err := h.runMethod(ctx, req.Msg.GetMethod(), req.Msg.GetArgs())
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&noderpcpb.CallResponse{Result: out}), nil
}

// withFS runs f on sandbox id's file system and closes it.
func (h *handler) withFS(ctx context.Context, id string, f func(session.FS) error) error {
	fs, err := h.svc.FS(ctx, id)
	if err != nil {
		return err
	}
	defer fs.Close()
	return f(fs)
}

// status answers NodeStatus.
func (h *handler) status(ctx context.Context) (Status, error) {
	if h.opts.Status != nil {
		return h.opts.Status(ctx)
	}
	return StatusOf(ctx, h.svc)
}

// StatusOf is the status NodeStatus answers by default, made from svc's Info
// and List (and the layers its images have mounted, when svc lists images as
// the node agent does). A node's HandlerOptions.Status may start from it and
// add what only the node knows (MaxSandboxes).
func StatusOf(ctx context.Context, svc session.Service) (Status, error) {
	info, err := svc.Info(ctx)
	if err != nil {
		return Status{}, err
	}
	list, err := svc.List(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Node: info.Node, Version: info.Version, Backends: info.Backends, Sandboxes: len(list)}
	for _, sb := range list {
		if sb.State == api.StateRunning {
			st.Running++
		}
		if sb.State != api.StateExited {
			st.CPU += sb.CPU
			st.MemoryBytes += sb.MemoryBytes
		}
	}
	// A service without images answers not_implemented: no layers then.
	if imgs, err := svc.Images(ctx); err == nil {
		for _, img := range imgs {
			for _, l := range img.Layers {
				if l.Mounted && !slices.Contains(st.Layers, l.Digest) {
					st.Layers = append(st.Layers, l.Digest)
				}
			}
		}
	}
	return st, nil
}

// authInterceptor refuses every request without a valid cluster token before
// its handler runs, and continues the caller's trace and trajectory step in the
// handler's context.
type authInterceptor struct{ h *handler }

func (a *authInterceptor) check(hdr http.Header, procedure string) error {
	if err := verifyTokenCached(&a.h.macs, a.h.opts.Secret, hdr.Get("Authorization"), a.h.opts.Now(), a.h.opts.MaxSkew); err != nil {
		a.h.log.Warn("node rpc: refused a request", "procedure", procedure, "err", err)
		return toWire(errdefs.New(api.CodeUnauthorized, "node rpc: %v", err))
	}
	return nil
}

func (a *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(req.Header(), req.Spec().Procedure); err != nil {
			return nil, err
		}
		ctx, out := extractStep(extractTrace(ctx, req.Header()), req.Header())
		resp, err := next(ctx, req)
		if err == nil && out != nil && out.Replayed {
			resp.Header().Set(api.ReplayedHeader, "true")
		}
		return resp, err
	}
}

func (a *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(conn.RequestHeader(), conn.Spec().Procedure); err != nil {
			return err
		}
		ctx, out := extractStep(extractTrace(ctx, conn.RequestHeader()), conn.RequestHeader())
		if out != nil {
			conn = &stepConn{StreamingHandlerConn: conn, out: out}
		}
		return next(ctx, conn)
	}
}
