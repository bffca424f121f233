package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// sandboxFlags are the flags that describe a new sandbox, shared by
// `dsec create` and `dsec run`.
type sandboxFlags struct {
	image, memory, disk, ttl, idle, requestID, cpuClass, node, backend string
	cpu                                                                float64
	env, constraints, labels                                           []string
	netf                                                               networkFlags
	userns, ksm, setuid                                                bool
	start                                                              startFlags
}

func (s *sandboxFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&s.image, "image", "", "image: a local image or environment name, or a registry reference (python:3.12-slim, ghcr.io/org/task@sha256:...) resolved to a digest and fetched by the server; default: the server's default image")
	f.StringVar(&s.node, "node", "", "in a cluster: create the sandbox on this node")
	f.StringArrayVar(&s.constraints, "constraint", nil, "in a cluster: KEY=VALUE a node's labels must match (repeatable)")
	f.StringVar(&s.backend, "backend", "", "isolation backend: container (default), microvm, fullvm (with --image desktop; see dsec info)")
	f.Float64Var(&s.cpu, "cpu", 0, "CPU limit in cores (default 1)")
	f.BoolVar(&s.ksm, "ksm", false, "let KSM merge identical pages of the sandbox's processes (the host's ksmd must run)")
	f.BoolVar(&s.setuid, "allow-setuid", false, "let setuid programs (sudo) work in the sandbox, up to sandbox root (no no_new_privs)")
	f.StringVar(&s.cpuClass, "cpu-class", "", "ls (latency-sensitive) or be (best-effort); default the server's --cpu-class-default")
	f.StringVar(&s.memory, "memory", "", "memory limit, e.g. 512m, 2g (default 512m)")
	f.StringVar(&s.disk, "disk", "", "writable layer size, e.g. 1g (default 1g)")
	f.StringVar(&s.ttl, "ttl", "", "delete the sandbox after this long, e.g. 1h")
	f.StringVar(&s.idle, "idle-timeout", "", "delete the sandbox after this long without use")
	f.StringArrayVarP(&s.env, "env", "e", nil, "KEY=VALUE for every process (repeatable)")
	f.StringVar(&s.requestID, "request-id", "", "idempotency key: a retry returns the same sandbox")
	f.BoolVar(&s.userns, "userns", false, "run in a user namespace of its own (--userns=false: without); default the server's --userns")
	s.netf.add(c)
	f.StringArrayVarP(&s.labels, "label", "l", nil, "KEY=VALUE label of the sandbox (repeatable)")
	s.start.add(c)
}

// request is the create request the flags describe; a malformed flag is an
// error naming it, before the server is asked anything.
func (s *sandboxFlags) request(cmd *cobra.Command) (api.CreateSandboxRequest, error) {
	req := api.CreateSandboxRequest{Backend: s.backend, Image: s.image, CPU: s.cpu, RequestID: s.requestID, Network: s.netf.policy(),
		CPUClass: s.cpuClass, KSM: s.ksm, Node: s.node, AllowSetuid: s.setuid}
	var err error
	if req.Constraints, err = parseKV("--constraint", s.constraints); err != nil {
		return req, err
	}
	if req.MemoryBytes, err = cliflag.ParseSize(s.memory); err != nil {
		return req, err
	}
	if req.DiskBytes, err = cliflag.ParseSize(s.disk); err != nil {
		return req, err
	}
	for _, d := range []struct {
		s   string
		dst *int64
	}{{s.ttl, &req.TTLSeconds}, {s.idle, &req.IdleTimeoutSeconds}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil || v < time.Second {
			return req, fmt.Errorf("invalid duration %q (examples: 30s, 10m, 2h)", d.s)
		}
		*d.dst = int64(v / time.Second)
	}
	if req.Env, err = parseEnv(s.env); err != nil {
		return req, err
	}
	if cmd.Flags().Changed("userns") {
		req.UserNamespace = &s.userns
	}
	if req.Labels, err = parseKV("--label", s.labels); err != nil {
		return req, err
	}
	return req, s.start.apply(cmd, &req)
}

// createWatched creates the sandbox, showing on stderr how far the server's
// fetch of an image by reference got meanwhile.
func createWatched(ctx context.Context, cl *client.Client, req api.CreateSandboxRequest) (api.Sandbox, error) {
	stop := func() {}
	if isReference(req.Image) && (req.Wait == nil || *req.Wait) {
		stop = progress.WatchPull(ctx, os.Stderr, req.Image, cl.WatchPull)
	}
	sb, err := cl.Create(ctx, req)
	stop()
	return sb, err
}

func createCmd() *cobra.Command {
	var sf sandboxFlags
	var noWait bool
	var count, parallel int
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its ID",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := sf.request(cmd)
			if err != nil {
				return err
			}
			if noWait {
				req.Wait = new(bool) // false
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			if count != 1 || parallel != 1 {
				return createMany(cmd.Context(), cl, req, count, parallel, os.Stdout, os.Stderr)
			}
			sb, err := createWatched(cmd.Context(), cl, req)
			if err != nil {
				return err
			}
			fmt.Println(sb.ID)
			return nil
		},
	}
	sf.add(c)
	f := c.Flags()
	f.IntVarP(&count, "count", "n", 1, "create this many sandboxes (one ID per line; a progress bar on a terminal)")
	f.IntVar(&parallel, "parallel", 1, "with --count: creates in flight at once")
	f.BoolVar(&noWait, "no-wait", false, "answer at once while the server fetches an image by reference (state pulling; dsec ls shows how far, then running or failed)")
	return c
}

// startFlags are create's start command and readiness check.
type startFlags struct {
	cmd, readyCmd, readyTimeout string
	entrypoint                  bool
	readyPort                   int
}

func (s *startFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&s.cmd, "start-cmd", "", "shell command started in the background once the sandbox exists (e.g. 'python3 -m http.server 8080')")
	f.BoolVar(&s.entrypoint, "entrypoint", false, "start the image's Entrypoint and Cmd instead of --start-cmd")
	f.StringVar(&s.readyCmd, "ready-cmd", "", "answer only once this shell command exits 0 in the sandbox (retried)")
	f.IntVar(&s.readyPort, "ready-port", 0, "answer only once this TCP port in the sandbox accepts a connection")
	f.StringVar(&s.readyTimeout, "ready-timeout", "", "how long to wait for --ready-cmd/--ready-port, e.g. 30s (default 60s, at most 10m)")
}

// apply sets the request's start fields; the server checks them (a bad one
// is invalid_argument naming the field).
func (s *startFlags) apply(cmd *cobra.Command, req *api.CreateSandboxRequest) error {
	req.StartCmd, req.Entrypoint, req.ReadyCmd, req.ReadyPort = s.cmd, s.entrypoint, s.readyCmd, s.readyPort
	if cmd.Flags().Changed("ready-port") && s.readyPort == 0 {
		req.ReadyPort = -1 // refused by the server, naming ready_port
	}
	if s.readyTimeout != "" {
		d, err := time.ParseDuration(s.readyTimeout)
		if err != nil {
			return fmt.Errorf("--ready-timeout: invalid duration %q (examples: 30s, 2m)", s.readyTimeout)
		}
		if req.ReadyTimeoutMs = d.Milliseconds(); req.ReadyTimeoutMs <= 0 {
			req.ReadyTimeoutMs = -1 // refused by the server, naming ready_timeout_ms
		}
	}
	return nil
}

// stateOf is a sandbox's STATE column: its state, and its start command's
// when that is not done and well; a pull's bytes fetched, a failed
// create's error code.
func stateOf(s api.Sandbox) string {
	if s.Pull != nil && s.Pull.TotalBytes > 0 {
		return fmt.Sprintf("%s (%d%%)", s.State, s.Pull.FetchedBytes*100/s.Pull.TotalBytes)
	}
	if s.Error != nil {
		return fmt.Sprintf("%s (%s)", s.State, s.Error.Code)
	}
	if s.Start != nil && (s.Start.State == api.StartFailed || s.Start.State == api.StartStarting) {
		return s.State + " (start " + s.Start.State + ")"
	}
	return s.State
}

func parseEnv(kvs []string) (map[string]string, error) { return parseKV("--env", kvs) }

// parseKV parses repeated KEY=VALUE flags.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid %s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// exitFromResult maps a command's result to this process's exit status the way a
// shell does: the exit code, or 128+signal.
func exitFromResult(res api.ExecResult) error {
	switch {
	case res.TimedOut:
		fmt.Fprintln(os.Stderr, "dsec: command timed out")
		return exitError{124}
	case res.OOMKilled:
		fmt.Fprintln(os.Stderr, "dsec: command killed: out of memory")
		return exitError{137}
	case res.Signal != "":
		n := signalNumber(res.Signal)
		return exitError{128 + n}
	case res.ExitCode != 0:
		return exitError{res.ExitCode}
	}
	return nil
}

func lsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			sbs, err := cl.List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(sbs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tIMAGE\tSTATE\tCPU\tMEMORY\tCREATED")
			for _, s := range sbs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%dMiB\t%s\n", s.ID, s.Image, stateOf(s), s.CPU, s.MemoryBytes>>20,
					time.Since(s.CreatedAt).Round(time.Second).String()+" ago")
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID [ID...]",
		Short: "Delete sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.Delete(cmd.Context(), id); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			sb, err := cl.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(sb)
		},
	}
}

func stateCmd(op string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " ID",
		Short: map[string]string{"pause": "Freeze every process of a sandbox", "resume": "Thaw a paused sandbox", "reset": "Give a sandbox a fresh writable layer and fresh processes"}[op],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			switch op {
			case "pause":
				_, err = cl.Pause(cmd.Context(), args[0])
			case "resume":
				_, err = cl.Resume(cmd.Context(), args[0])
			default:
				_, err = cl.Reset(cmd.Context(), args[0])
			}
			return err
		},
	}
}

// isReference reports whether an --image value can only be a registry
// reference (as internal/image.IsReference: a '/', ':' or '@'), which the
// server may have to fetch.
func isReference(name string) bool { return strings.ContainsAny(name, "/:@") }
