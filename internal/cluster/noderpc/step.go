package noderpc

import (
	"context"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A trajectory step tag (session.WithStep) crosses the wire like the trace
// context: the client puts it on the request as the /v1 headers
// (X-Dsec-Trajectory, X-Dsec-Step), the handler tags its context with it, so
// the node's trajectory decorator logs or replays the step next to the
// sandbox. The answer carries X-Dsec-Replayed: true when the node answered
// from its log, and the client reports that in the caller's StepOutcome.

// injectStep puts ctx's step tag on an outgoing request's headers (an
// http.Header, or a headerWriter).
func injectStep(ctx context.Context, h interface{ Set(k, v string) }) {
	st, _, ok := session.StepFrom(ctx)
	if !ok {
		return
	}
	h.Set(api.TrajectoryHeader, st.Trajectory)
	h.Set(api.StepHeader, strconv.Itoa(st.N))
}

// extractStep returns ctx tagged with the step an incoming request carried (a
// malformed tag is ignored: only a client of this package sends one), and the
// outcome the node's decorator fills in (nil without a tag).
func extractStep(ctx context.Context, h http.Header) (context.Context, *session.StepOutcome) {
	traj := h.Get(api.TrajectoryHeader)
	n, err := strconv.Atoi(h.Get(api.StepHeader))
	if traj == "" || err != nil {
		return ctx, nil
	}
	return session.WithStep(ctx, session.Step{Trajectory: traj, N: n})
}

// reportReplayed tells the caller's StepOutcome (if its ctx is tagged) that
// the node answered from its log.
func reportReplayed(ctx context.Context, h http.Header) {
	if h.Get(api.ReplayedHeader) != "true" {
		return
	}
	if _, out, ok := session.StepFrom(ctx); ok && out != nil {
		out.Replayed = true
	}
}

// stepConn sets X-Dsec-Replayed on a stream's response headers before its
// first message when the node's decorator answered from the log (it decides
// before the handler sends anything).
type stepConn struct {
	connect.StreamingHandlerConn
	out  *session.StepOutcome
	sent bool
}

func (c *stepConn) Send(msg any) error {
	if !c.sent {
		c.sent = true
		if c.out.Replayed {
			c.ResponseHeader().Set(api.ReplayedHeader, "true")
		}
	}
	return c.StreamingHandlerConn.Send(msg)
}
