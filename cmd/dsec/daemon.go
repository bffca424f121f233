package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// daemonCommand is a command dsecd runs: dsec lists it and runs it by exec'ing
// dsecd with the same arguments, so `dsec server` is `dsecd server`.
type daemonCommand struct {
	name, short string
	hidden      bool
}

// daemonCommands are the commands that link server-side code (the node server,
// the cluster roles, local image builds, the benchmarks, the demo). Their
// flags and help are dsecd's: `dsec server --help` prints dsecd's.
func daemonCommands() []daemonCommand {
	return []daemonCommand{
		{"server", "Run the node server (API + node agent) in the foreground", false},
		{"agent", "Run a cluster node: the node agent, registered in etcd, serving API servers over RPC", false},
		{"apiserver", "Run a stateless cluster API server: dsec's /v1 API, placement and routing to the nodes", false},
		{"etcd", "Run an etcd member (the cluster's state store) embedded in dsec", false},
		{"image", "Build layers and compose environments (EROFS layers in a blob store)", false},
		{"bench", "Benchmarks (each starts a private node in a scratch dir)", false},
		{"doctor", "Check this host's features (cgroups, EROFS, FUSE resend, idmapped mounts, user namespaces, nftables, KSM, swap, KVM) and what is degraded without each", false},
		{"demo", "Start a private node and walk through what dsec does (needs root and the debian image: `make demo`)", false},
		// A layer daemon (or its holder) started by a dsec that still was the
		// server restarts layerd as `dsec layerd`.
		{"layerd", "Layer daemon (started by the node agent)", true},
	}
}

// daemonCmd is the dsec command that runs dsecd's command d.
func daemonCmd(d daemonCommand) *cobra.Command {
	return &cobra.Command{
		Use:                d.name,
		Short:              d.short,
		Long:               d.short + ".\n\nRuns `dsecd " + d.name + "` (dsecd is found next to dsec, else on PATH); `dsec " + d.name + " --help` shows its flags.",
		Hidden:             d.hidden,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			self, _ := os.Executable()
			bin, err := findDaemon(self, exec.LookPath)
			if err != nil {
				return fmt.Errorf("dsec %s: %w", d.name, err)
			}
			argv := append([]string{bin, d.name}, args...)
			// Replace this process: signals, the process ID (a supervisor's
			// kill) and the exit status are dsecd's.
			if err := syscall.Exec(bin, argv, os.Environ()); err != nil {
				return fmt.Errorf("dsec %s: exec %s: %w", d.name, bin, err)
			}
			return nil
		},
	}
}

// findDaemon returns the dsecd that belongs to the dsec at self: dsecd with
// the same suffix next to it (bin/dsec-race runs bin/dsecd-race), else dsecd
// next to it, else dsecd on PATH.
func findDaemon(self string, lookPath func(string) (string, error)) (string, error) {
	var tried []string
	if self != "" {
		dir, base := filepath.Split(self)
		var names []string
		if suffix, ok := strings.CutPrefix(base, "dsec"); ok && suffix != "" {
			names = append(names, "dsecd"+suffix)
		}
		for _, n := range append(names, "dsecd") {
			p := filepath.Join(dir, n)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p, nil
			}
			tried = append(tried, p)
		}
	}
	if p, err := lookPath("dsecd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("dsecd, the daemon binary, not found (tried %s and PATH): build it with `make build` (bin/dsecd) or install it next to dsec",
		strings.Join(tried, ", "))
}
