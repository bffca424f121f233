package e2b_test

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FollowProcess looks at the fake's in-memory logs every millisecond (the
// node agent wakes on its log files instead).
func (f *fakeService) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	return session.FollowByPolling(ctx, f, id, procID, req, time.Millisecond)
}
