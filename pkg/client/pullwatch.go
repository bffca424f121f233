package client

import (
	"context"
	"errors"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// WatchPull calls f with the progress of the node's pull of ref (a
// reference or an image digest) every interval (0: 250 ms) until ctx ends,
// typically alongside a Create or PullImage naming ref. While no pull of ref
// is in flight (not started yet, the image already on the node, or ended) f
// is not called; a server that does not report pulls (a cluster's API
// server) ends the watch at once.
func (c *Client) WatchPull(ctx context.Context, ref string, interval time.Duration, f func(api.PullProgress)) {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pr, err := c.PullProgress(ctx, ref)
		var ae *api.Error
		switch {
		case err == nil:
			f(pr)
		case ctx.Err() != nil:
			return
		case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		case errors.As(err, &ae) && ae.Code == api.CodeNotImplemented:
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
