package main

import (
	"encoding/json"
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func addNetworkFlags(c *cobra.Command, allow, rules *[]string) {
	c.Flags().StringArrayVar(allow, "allow", nil, "allow egress to CIDR[:PORT[-PORT]] (repeatable or comma-separated)")
	c.Flags().StringArrayVar(rules, "rule", nil, "allow egress to an operator-defined rule set by name (repeatable)")
}

func networkCmd() *cobra.Command {
	var allow, rules []string
	var none bool
	c := &cobra.Command{
		Use:   "network ID",
		Short: "Show or replace a sandbox's egress policy",
		Long: `With --allow/--rule, replace the sandbox's egress policy (new connections see it
at once); with --none, allow nothing; with neither, show the policy. Prints the
sandbox's network status (policy, address, denied connection attempts) as JSON.`,
		Example: `  dsec network sb-1234 --rule pypi --allow 10.1.2.0/24:443
  dsec network sb-1234 --none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := cliflag.NetworkPolicy(allow, rules)
			if none && p != nil {
				return errors.New("--none excludes --allow and --rule")
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			var sb api.Sandbox
			switch {
			case none:
				sb, err = cl.SetNetwork(cmd.Context(), args[0], api.NetworkPolicy{})
			case p != nil:
				sb, err = cl.SetNetwork(cmd.Context(), args[0], *p)
			default:
				sb, err = cl.Get(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			st := sb.Network
			if st == nil {
				st = &api.NetworkStatus{}
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	}
	addNetworkFlags(c, &allow, &rules)
	c.Flags().BoolVar(&none, "none", false, "allow nothing (the sandbox keeps its link, every new connection is refused)")
	return c
}
