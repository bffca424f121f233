package registry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// schemeGuard refuses plain HTTP to a registry not configured as insecure
// (go-containerregistry would fall back to it for loopback addresses).
type schemeGuard struct {
	inner    http.RoundTripper
	insecure func(host string) bool
}

func (g *schemeGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !g.insecure(r.URL.Host) {
		return nil, errdefs.New(api.CodeUnavailable, "registry %s: plain HTTP refused (not configured as insecure)", r.URL.Host)
	}
	return g.inner.RoundTrip(r)
}

// retryTransport retries a request answered 429 or 5xx, or not answered at
// all, with exponential back-off and jitter, waiting what Retry-After says
// when the registry says it (up to MaxBackoff). Only requests whose body can
// be sent again are retried.
type retryTransport struct {
	inner http.RoundTripper
	cfg   *Config
}

func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout ||
		code == http.StatusInternalServerError || code == http.StatusBadGateway ||
		code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

func (t *retryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if r.GetBody == nil {
			return t.inner.RoundTrip(r)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	backoff := t.cfg.MinBackoff
	for try := 0; ; try++ {
		req := r
		if body != nil {
			req = r.Clone(r.Context())
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := t.inner.RoundTrip(req)
		if try >= t.cfg.Retries || r.Context().Err() != nil {
			return resp, err
		}
		var wait time.Duration
		switch {
		case err != nil:
			if classified(err) {
				return nil, err // refused here (schemeGuard), not a network fault
			}
			wait = jitter(backoff)
		case retryable(resp.StatusCode):
			wait = retryAfter(resp.Header.Get("Retry-After"), jitter(backoff))
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		default:
			return resp, nil
		}
		wait = min(wait, t.cfg.MaxBackoff)
		if err := sleep(r.Context(), wait); err != nil {
			return nil, err
		}
		backoff = min(backoff*2, t.cfg.MaxBackoff)
	}
}

func classified(err error) bool {
	var e *errdefs.Error
	return errors.As(err, &e)
}

// retryAfter reads a Retry-After header (seconds or an HTTP date); def if
// absent or unreadable.
func retryAfter(h string, def time.Duration) time.Duration {
	if h == "" {
		return def
	}
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return def
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
