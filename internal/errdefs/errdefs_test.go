package errdefs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestClassification(t *testing.T) {
	base := NotFound("sandbox %q", "x")
	wrapped := fmt.Errorf("exec: %w", base)
	if CodeOf(wrapped) != api.CodeNotFound {
		t.Fatalf("code = %s", CodeOf(wrapped))
	}
	ae := ToAPI(wrapped)
	if ae.Status != http.StatusNotFound || ae.Infrastructure {
		t.Fatalf("bad api error %+v", ae)
	}
	if CodeOf(errors.New("boom")) != api.CodeInternal {
		t.Fatal("unclassified must be internal")
	}
	if e := ToAPI(errors.New("boom")); !e.Infrastructure || !e.Retryable {
		t.Fatalf("internal must be infrastructure+retryable: %+v", e)
	}
	if CodeOf(fmt.Errorf("x: %w", context.DeadlineExceeded)) != api.CodeDeadlineExceeded {
		t.Fatal("deadline")
	}
	cause := errors.New("disk full")
	if !errors.Is(Internal(cause, "write"), cause) {
		t.Fatal("cause lost")
	}
}
