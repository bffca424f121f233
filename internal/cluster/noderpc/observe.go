package noderpc

import (
	"context"
	"errors"
	"path"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb/noderpcpbconnect"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Observer is told about every request a Node RPC handler answered
// (internal/metrics implements it). Its method must not block.
type Observer interface {
	// RPC reports one request: procedure is the unary method Call ran
	// ("Create", "Exec", ...) or the stream ("ExecStream", "ReadFile", ...),
	// "other" for a name the handler does not serve, so the values are
	// bounded; code is "ok" or the answer's error code (api.Code); d is how
	// long it took (a stream: until it ended), refused requests included.
	RPC(procedure, code string, d time.Duration)
}

// CodeOK is the code Observer.RPC reports for a request that succeeded.
const CodeOK = "ok"

// otherProcedure is the procedure label of a name the handler does not serve.
const otherProcedure = "other"

// observeInterceptor times every request and reports it to the Observer. It is
// the outermost interceptor, so requests the auth interceptor refuses count too.
type observeInterceptor struct{ obs Observer }

// unaryProcedure names a unary request: Call's method when the handler serves it.
func unaryProcedure(req connect.AnyRequest) string {
	if req.Spec().Procedure != noderpcpbconnect.NodeCallProcedure {
		return otherProcedure
	}
	if m, ok := req.Any().(*noderpcpb.CallRequest); ok {
		if _, known := methods[m.GetMethod()]; known {
			return m.GetMethod()
		}
	}
	return otherProcedure
}

// streamProcedure names a stream by its procedure's last element.
func streamProcedure(spec connect.Spec) string {
	switch spec.Procedure {
	case noderpcpbconnect.NodeExecStreamProcedure, noderpcpbconnect.NodeProcessLogsProcedure,
		noderpcpbconnect.NodeReadFileProcedure, noderpcpbconnect.NodeWriteFileProcedure, noderpcpbconnect.NodeWriteTarProcedure,
		noderpcpbconnect.NodeExtractTarProcedure, noderpcpbconnect.NodeDialProcedure:
		return path.Base(spec.Procedure)
	}
	return otherProcedure
}

// rpcCode is "ok" or err's class: the ErrorInfo the handler put on it, else
// the RPC layer's refusal (errdefs.FromConnectLayer), else internal.
func rpcCode(err error) string {
	if err == nil {
		return CodeOK
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return string(api.CodeInternal)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*noderpcpb.ErrorInfo); ok && info.GetCode() != "" {
				return info.GetCode()
			}
		}
	}
	if c, ok := errdefs.FromConnectLayer(ce.Code()); ok {
		return string(c)
	}
	if ce.Code() == connect.CodeCanceled {
		return string(api.CodeUnavailable) // the caller went away
	}
	return string(api.CodeInternal)
}

func (o observeInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		t0 := time.Now()
		resp, err := next(ctx, req)
		o.obs.RPC(unaryProcedure(req), rpcCode(err), time.Since(t0))
		return resp, err
	}
}

func (o observeInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (o observeInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		t0 := time.Now()
		err := next(ctx, conn)
		o.obs.RPC(streamProcedure(conn.Spec()), rpcCode(err), time.Since(t0))
		return err
	}
}
