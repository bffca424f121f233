package session

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Forker is an optional part of a Service: forking a sandbox into children that
// start from its current file system (api.ForkRequest says what is and is not
// copied). A front end checks for it and answers not_implemented without it; a
// decorator (trajectory log, quotas) that wraps a Forker should forward Fork.
// The backend's own capability is checked by the implementation
// (driver.Capabilities.Fork), also with not_implemented.
type Forker interface {
	Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error)
}

// Committer is an optional part of a Service: packing a sandbox's writable
// layer into a new environment (DSec's pack_diff; api.CommitRequest). The same
// rules as Forker apply.
type Committer interface {
	Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error)
}
