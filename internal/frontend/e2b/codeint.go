package e2b

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/codeint"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The code interpreter (E2B's template "code-interpreter-v1", the one
// @e2b/code-interpreter and e2b_code_interpreter create by default). The
// template is a directory image of that name (scripts/codeint-image.sh: the
// judge image plus Debian's ipykernel and the account "user"); what makes it
// E2B's code interpreter is the service of package codeint, which this binary
// embeds: create writes it into the sandbox, starts it (as root, in /home/user, as E2B does) and answers
// only once it serves on CodeInterpreterPort. Requests for that port reach it
// through the sandbox port proxy (ports.go), so they carry only the traffic
// token when ports are private, as on E2B.

// CodeInterpreterTemplate is E2B's code interpreter template ID.
const CodeInterpreterTemplate = "code-interpreter-v1"

// CodeInterpreterPort is the port the interpreter service listens on.
const CodeInterpreterPort = codeint.Port

// codeIntStartTimeout bounds the interpreter's start (its first kernel
// included) before create gives up on the sandbox.
const codeIntStartTimeout = codeint.StartTimeout

// labelService marks a background process the front end started for its
// template (its value names the service).
const labelService = labelPrefix + "service"

// templateService is what create starts in a sandbox of a template.
type templateService struct {
	name  string
	files map[string][]byte // path -> content, written before the start
	req   api.ExecRequest
	port  int // create waits until GET /health on it answers 200
	// start bounds the wait (0: codeIntStartTimeout).
	start time.Duration
}

// templateServices are the templates whose sandboxes run a service of the
// front end's (Handler.services).
func templateServices() map[string]templateService {
	return map[string]templateService{
		CodeInterpreterTemplate: {
			name:  codeint.ServiceName,
			files: codeint.Files(),
			req:   codeint.Command(nil),
			port:  CodeInterpreterPort,
		},
	}
}

// startTemplateService starts template's service in sandbox sb, if it has one,
// and waits until it serves. env (create's envVars) is passed on.
func (h *Handler) startTemplateService(ctx context.Context, sb api.Sandbox, template string, env map[string]string) error {
	svc, ok := h.services[template]
	if !ok {
		return nil
	}
	if svc.start <= 0 {
		svc.start = codeIntStartTimeout
	}
	ctx, cancel := context.WithTimeout(session.WithoutStep(ctx), svc.start)
	defer cancel()
	if err := codeint.WriteFiles(ctx, h.svc, sb.ID, svc.files); err != nil {
		return fmt.Errorf("template %s: %w", template, err)
	}
	req := svc.req
	req.Env = map[string]string{}
	for k, v := range env {
		req.Env[k] = v
	}
	for k, v := range svc.req.Env {
		req.Env[k] = v
	}
	req.Labels = map[string]string{labelService: svc.name}
	p, err := h.svc.StartProcess(ctx, sb.ID, req)
	if err != nil {
		return fmt.Errorf("template %s: start %s: %w", template, svc.name, err)
	}
	return h.awaitService(ctx, sb.ID, p.ID, svc)
}

// awaitService polls the service's /health until it answers 200, its process
// ends (an error with the end of its output) or ctx ends.
func (h *Handler) awaitService(ctx context.Context, id, procID string, svc templateService) error {
	// A transport of its own, without keep-alive: a connection dialed under
	// this call's deadline must not be pooled for the port proxy.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return session.DialProxyAddr(ctx, h.svc, addr)
		}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + session.ProxyHost(id, svc.port) + "/health"
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return errdefs.Internal(err, "%s health request", svc.name)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p, err := h.svc.GetProcess(ctx, id, procID); err == nil && !p.Running {
			return errdefs.New(api.CodeUnavailable, "%s exited before serving%s", svc.name, h.processTail(ctx, id, procID))
		}
		select {
		case <-ctx.Done():
			return errdefs.New(api.CodeUnavailable, "%s did not serve on port %d within %s", svc.name, svc.port, svc.start)
		case <-tick.C:
		}
	}
}

// processTail is the last KiB of a process's stderr, for an error message.
func (h *Handler) processTail(ctx context.Context, id, procID string) string {
	return codeint.ProcessTail(ctx, h.svc, id, procID)
}
