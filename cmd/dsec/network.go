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

// networkFlags are the egress policy flags of create and network.
type networkFlags struct {
	allow, rules, allowDomains, denyDomains []string
}

func (f *networkFlags) add(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.allow, "allow", nil, "allow egress to CIDR[:PORT[-PORT]] (repeatable or comma-separated)")
	c.Flags().StringArrayVar(&f.rules, "rule", nil, "allow egress to an operator-defined rule set by name (repeatable)")
	c.Flags().StringArrayVar(&f.allowDomains, "allow-domain", nil, "allow egress to what a name (pypi.org) or a wildcard (*.pythonhosted.org) resolves to (repeatable or comma-separated)")
	c.Flags().StringArrayVar(&f.denyDomains, "deny-domain", nil, "answer NXDOMAIN for a name or wildcard unless an --allow-domain matches it (repeatable or comma-separated)")
}

// policy is the policy the flags give; nil when none is set.
func (f *networkFlags) policy() *api.NetworkPolicy {
	p := cliflag.NetworkPolicy(f.allow, f.rules)
	ad, dd := cliflag.SplitList(f.allowDomains), cliflag.SplitList(f.denyDomains)
	if len(ad) == 0 && len(dd) == 0 {
		return p
	}
	if p == nil {
		p = &api.NetworkPolicy{}
	}
	p.AllowDomains, p.DenyDomains = ad, dd
	return p
}

func networkCmd() *cobra.Command {
	var netf networkFlags
	var none bool
	c := &cobra.Command{
		Use:   "network ID",
		Short: "Show or replace a sandbox's egress policy",
		Long: `With --allow/--rule/--allow-domain/--deny-domain, replace the sandbox's egress
policy (new connections see it at once); with --none, allow nothing; with none of
them, show the policy. Prints the sandbox's network status (policy, address, denied
connection attempts) as JSON.`,
		Example: `  dsec network sb-1234 --rule pypi --allow 10.1.2.0/24:443
  dsec network sb-1234 --allow-domain pypi.org,files.pythonhosted.org
  dsec network sb-1234 --none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := netf.policy()
			if none && p != nil {
				return errors.New("--none excludes --allow, --rule and the domain flags")
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
	netf.add(c)
	c.Flags().BoolVar(&none, "none", false, "allow nothing (the sandbox keeps its link, every new connection is refused)")
	return c
}
