package session

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestValidateDeadline(t *testing.T) {
	for name, tc := range map[string]struct {
		req  api.DeadlineRequest
		want string
	}{
		"negative":  {api.DeadlineRequest{TimeoutSeconds: -1}, "timeout_seconds is negative"},
		"absurd":    {api.DeadlineRequest{TimeoutSeconds: 1 << 62}, "timeout_seconds is more than"},
		"on_expiry": {api.DeadlineRequest{TimeoutSeconds: 5, OnExpiry: "kill"}, "on_expiry must be"},
	} {
		err := ValidateDeadline(tc.req)
		if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want invalid_argument naming %q", name, err, tc.want)
		}
	}
	for _, ok := range []api.DeadlineRequest{{}, {TimeoutSeconds: api.MaxTimeoutSeconds, OnExpiry: api.ExpiryPause}, {TimeoutSeconds: 1, OnExpiry: api.ExpiryDelete, ExtendOnly: true}} {
		if err := ValidateDeadline(ok); err != nil {
			t.Errorf("%+v refused: %v", ok, err)
		}
	}
}
