package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCall runs a program on its tests (POST /v1/fncall). The program's failures are
// verdicts in the result; errors are API errors (bad input, infrastructure). It is
// never retried automatically.
func (c *Client) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	var res api.FnCallResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/fncall", json: req}, &res)
	return res, err
}

// FnCallBatch runs many calls (POST /v1/fncall/batch) and calls fn with each
// result as it arrives (in completion order; Index says which call). A line with
// Error set is a call that could not run. It returns fn's first error, or an
// error if the stream broke before every call was answered.
func (c *Client) FnCallBatch(ctx context.Context, calls []api.FnCallRequest, fn func(api.FnCallResult) error) error {
	resp, err := c.send(ctx, call{method: http.MethodPost, path: "/v1/fncall/batch", json: api.FnCallBatchRequest{Calls: calls}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	seen := 0
	for {
		var r api.FnCallResult
		if err := dec.Decode(&r); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("dsec client: reading fncall batch: %w", err)
		}
		seen++
		if err := fn(r); err != nil {
			return err
		}
	}
	if seen != len(calls) {
		return fmt.Errorf("dsec client: fncall batch ended after %d of %d results", seen, len(calls))
	}
	return nil
}
