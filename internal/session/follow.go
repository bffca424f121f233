package session

import (
	"context"
	"io"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// FollowByPolling is FollowProcess for a service whose process logs cannot
// wake a waiter (the test fakes): it reads the process (GetProcess) and then
// its logs (ProcessLogs) again every poll until there is output past req's
// offsets, the process has ended or req.WaitMs has passed. The node agent
// wakes on its logs instead.
func FollowByPolling(ctx context.Context, svc Service, id, procID string, req api.FollowRequest, poll time.Duration) (api.ProcessOutput, error) {
	if err := req.Validate(); err != nil {
		return api.ProcessOutput{}, err
	}
	deadline := time.Now().Add(time.Duration(req.WaitMs) * time.Millisecond)
	for {
		p, err := svc.GetProcess(ctx, id, procID)
		if err != nil {
			return api.ProcessOutput{}, err
		}
		out := api.ProcessOutput{Process: p}
		complete := true
		for _, s := range []struct {
			stream string
			off    int64
			dst    *[]byte
		}{{"stdout", req.StdoutOffset, &out.Stdout}, {"stderr", req.StderrOffset, &out.Stderr}} {
			rc, err := svc.ProcessLogs(ctx, id, procID, s.stream, s.off)
			if err != nil {
				return api.ProcessOutput{}, err
			}
			b, err := io.ReadAll(io.LimitReader(rc, int64(req.Limit())+1))
			rc.Close()
			if err != nil {
				return api.ProcessOutput{}, err
			}
			if len(b) > req.Limit() {
				b, complete = b[:req.Limit()], false
			}
			if len(b) > 0 {
				*s.dst = b
			}
		}
		out.Ended = !p.Running && complete
		wait := time.Until(deadline)
		if len(out.Stdout) > 0 || len(out.Stderr) > 0 || !p.Running || wait <= 0 {
			return out, nil
		}
		t := time.NewTimer(min(poll, wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return out, nil
		case <-t.C:
		}
	}
}
