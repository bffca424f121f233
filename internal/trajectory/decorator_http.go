package trajectory

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// errorHeader is dsec's own error header: never taken from an application's answer.
const errorHeader = "X-Dsec-Error"

// HTTP sends one request to port inside sandbox id through the inner service's
// Dial; it is a step (http) when ctx is tagged. Fingerprint: method, port,
// path+query, Content-Type and the body's sha256 and size. The request body is
// read before the step begins; an answer up to MaxBodyLog is read whole and
// logged (status, every header, body), a larger one is passed through as it comes
// and logged as its hash. Errors of the round trip that dsec did not classify
// (nothing listening, a reset) are bad_gateway: results, logged like answers.
func (s *Service) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	if !tagged(ctx) {
		return s.roundTrip(ctx, id, port, req)
	}
	tag, out, _ := session.StepFrom(ctx)
	sp, err := spool(req.Body, 0, s.opts.TempDir)
	if err != nil {
		return session.HTTPResponse{}, err
	}
	defer sp.close()
	a := HTTPArgs{Method: req.Method, Port: port, Path: req.Path, ContentType: req.Header.Get("Content-Type"),
		BodySHA256: sp.sum, BodySize: sp.size}
	o, l, err := s.begin(ctx, tag, out, stepSpec{op: OpHTTP, sandbox: id, args: a, input: sp.data, stored: sp.stored})
	switch {
	case err != nil:
		return session.HTTPResponse{}, err
	case o != nil:
		if o.Error != nil {
			return session.HTTPResponse{}, replayError(o)
		}
		if o.HTTP == nil {
			return session.HTTPResponse{}, errdefs.Internal(nil, "step %d of trajectory %q has no HTTP answer", tag.N, tag.Trajectory)
		}
		return session.HTTPResponse{Status: o.HTTP.Status, Header: o.HTTP.Header.Clone(), Body: io.NopCloser(bytes.NewReader(o.Data))}, nil
	}
	defer l.guard()
	req.Body, req.ContentLength = sp.reader(), sp.size
	resp, err := s.roundTrip(session.WithoutStep(l.ctx), id, port, req)
	if err != nil {
		return resp, l.fail(err)
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyLog+1))
	if err != nil {
		resp.Body.Close()
		return session.HTTPResponse{}, l.fail(badGateway(id, port, err))
	}
	if len(head) > MaxBodyLog {
		resp.Body = newBigReader(l, head, resp.Body, -1)
		return resp, nil
	}
	resp.Body.Close()
	l.finishOutcome(Outcome{HTTP: &HTTPHead{Status: resp.Status, Header: resp.Header}, Data: head})
	resp.Body = io.NopCloser(bytes.NewReader(head))
	return resp, nil
}

// roundTrip sends req over the inner service's Dial.
func (s *Service) roundTrip(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	s.httpOnce.Do(func() {
		s.client = &http.Client{
			Transport: &http.Transport{
				Proxy:                 nil,
				DialContext:           s.dialEncoded,
				MaxIdleConnsPerHost:   16,
				IdleConnTimeout:       30 * time.Second,
				ExpectContinueTimeout: time.Second,
				DisableCompression:    true,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
	if !strings.HasPrefix(req.Path, "/") {
		req.Path = "/" + req.Path
	}
	host := session.ProxyHost(id, port)
	hr, err := http.NewRequestWithContext(ctx, req.Method, "http://"+host+req.Path, req.Body)
	if err != nil {
		return session.HTTPResponse{}, errdefs.Invalid("HTTP request: %v", err)
	}
	if req.Header != nil {
		hr.Header = req.Header.Clone()
	}
	hr.Host = "localhost:" + strconv.Itoa(port)
	hr.ContentLength = req.ContentLength
	if req.Body == nil {
		hr.ContentLength = 0
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		var ce *errdefs.Error
		var ae *api.Error
		if errors.As(err, &ce) || errors.As(err, &ae) {
			return session.HTTPResponse{}, err
		}
		return session.HTTPResponse{}, badGateway(id, port, err)
	}
	resp.Header.Del(errorHeader)
	return session.HTTPResponse{Status: resp.StatusCode, Header: resp.Header, Body: resp.Body}, nil
}

func (s *Service) dialEncoded(ctx context.Context, _, addr string) (net.Conn, error) {
	return session.DialProxyAddr(ctx, s.inner, addr)
}

func badGateway(id string, port int, err error) error {
	return api.NewError(api.CodeBadGateway, "proxy to port %d of sandbox %s: %v", port, id, err)
}
