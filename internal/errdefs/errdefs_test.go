package errdefs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

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

func TestRetryAfter(t *testing.T) {
	e := Exhausted(2*time.Second, "node is full")
	if CodeOf(e) != api.CodeResourceExhausted {
		t.Fatalf("code = %s", CodeOf(e))
	}
	for _, err := range []error{
		e,
		fmt.Errorf("create: %w", e),
		Wrap(api.CodeResourceExhausted, e, "outer without a delay"),
		errors.Join(errors.New("other"), fmt.Errorf("x: %w", e)),
	} {
		if d, ok := RetryAfter(err); !ok || d != 2*time.Second {
			t.Errorf("RetryAfter(%v) = %v %v, want 2s", err, d, ok)
		}
	}
	for _, err := range []error{nil, New(api.CodeResourceExhausted, "no delay"), errors.New("plain")} {
		if d, ok := RetryAfter(err); ok {
			t.Errorf("RetryAfter(%v) = %v, want none", err, d)
		}
	}
}
