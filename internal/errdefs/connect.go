package errdefs

import (
	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/pkg/api"
)

// connectCodes is dsec's one error-code → Connect-code table, used by every
// Connect transport (the node RPC and E2B's envd). Each class gets the code
// Connect's documentation gives that situation:
//   - a wrong state (conflict, a diverged or unfinished trajectory step) is
//     FailedPrecondition: the caller must change something before retrying;
//   - anything over a limit (node capacity, a project's quota, a message's
//     size) is ResourceExhausted;
//   - a sandbox or node that cannot answer (gone, lost, unreachable port) is
//     Unavailable, which E2B's SDK reports as "sandbox not running".
var connectCodes = map[api.Code]connect.Code{
	api.CodeUnauthorized:          connect.CodeUnauthenticated,
	api.CodePermissionDenied:      connect.CodePermissionDenied,
	api.CodeInvalidArgument:       connect.CodeInvalidArgument,
	api.CodeNotFound:              connect.CodeNotFound,
	api.CodeAlreadyExists:         connect.CodeAlreadyExists,
	api.CodeConflict:              connect.CodeFailedPrecondition,
	api.CodeTrajectoryDiverged:    connect.CodeFailedPrecondition,
	api.CodeOutcomeUnknown:        connect.CodeFailedPrecondition,
	api.CodeStartFailed:           connect.CodeFailedPrecondition,
	api.CodePayloadTooLarge:       connect.CodeResourceExhausted,
	api.CodeResourceExhausted:     connect.CodeResourceExhausted,
	api.CodeQuotaExceeded:         connect.CodeResourceExhausted,
	api.CodeDeadlineExceeded:      connect.CodeDeadlineExceeded,
	api.CodeSandboxGone:           connect.CodeUnavailable,
	api.CodeTrajectorySandboxLost: connect.CodeUnavailable,
	api.CodeUnavailable:           connect.CodeUnavailable,
	api.CodeNodeLost:              connect.CodeUnavailable,
	api.CodeBadGateway:            connect.CodeUnavailable,
	api.CodeNotImplemented:        connect.CodeUnimplemented,
	api.CodeInternal:              connect.CodeInternal,
}

// ConnectCode is the Connect code an error of class code travels with; a class
// this build does not know is Unknown.
func ConnectCode(code api.Code) connect.Code {
	if c, ok := connectCodes[code]; ok {
		return c
	}
	return connect.CodeUnknown
}

// connectLayerCodes is the reverse direction for the few codes a Connect
// server's own layer answers before any handler ran (so no dsec class rides
// along): a message over the read limit, a procedure the server does not have,
// a message it cannot decode, a refused token.
var connectLayerCodes = map[connect.Code]api.Code{
	connect.CodeResourceExhausted: api.CodePayloadTooLarge,
	connect.CodeUnimplemented:     api.CodeNotImplemented,
	connect.CodeInvalidArgument:   api.CodeInvalidArgument,
	connect.CodeUnauthenticated:   api.CodeUnauthorized,
}

// FromConnectLayer classifies a Connect error that carries no dsec class: the
// refusal of the Connect layer itself (ok false for any other code, e.g. a
// transport failure).
func FromConnectLayer(c connect.Code) (api.Code, bool) {
	code, ok := connectLayerCodes[c]
	return code, ok
}
