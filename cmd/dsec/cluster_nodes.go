package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/client"
)

// nodesCmd lists a cluster's nodes and drains them.
func nodesCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "nodes",
		Short: "List a cluster's nodes (name, address, state, backends, sandboxes, load)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			nodes, err := cl.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(nodes)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tADDRESS\tSTATE\tBACKENDS\tSANDBOXES\tLOAD\tLABELS\tREPORTED")
			for _, n := range nodes {
				var labels []string
				for k, v := range n.Labels {
					labels = append(labels, k+"="+v)
				}
				sort.Strings(labels)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%.0f%%\t%s\t%s ago\n", n.Name, n.Addr, n.State, strings.Join(n.Backends, ","),
					n.Sandboxes, n.MaxSandboxes, 100*n.Load, strings.Join(labels, ","), time.Since(n.ReportedAt).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	for _, drain := range []bool{true, false} {
		name, short := "drain", "Stop placing sandboxes on a node (its sandboxes keep running)"
		if !drain {
			name, short = "undrain", "Let a drained node take new sandboxes again"
		}
		c.AddCommand(&cobra.Command{
			Use:   name + " NAME",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := client.FromEnv()
				if err != nil {
					return err
				}
				return cl.SetDrain(cmd.Context(), args[0], drain)
			},
		})
	}
	c.AddCommand(nodesRmCmd())
	return c
}

// nodesRmCmd removes a lost node from the cluster.
func nodesRmCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a lost node (retired for good): its registration, its environments' in-use marks and request claims; its sandboxes are gone",
		Long: `Remove a lost node from the cluster for good. Refused (409) while the node's
agent holds its lease: stop the agent first and wait until "dsec nodes" shows
it lost. Removes its registration, its in-use marks on environments (so
"dsec image rm" no longer names it) and the create request-ID claims it held.
Its sandboxes are gone: every call on them answers not_found, and the quota
reconciler releases their reservations. An agent started again under the
same name joins as a new node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			out, err := cl.RemoveNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			fmt.Printf("removed node %s: %d sandboxes gone, %d environment marks (%s), %d request claims\n",
				out.Node, out.Sandboxes, len(out.EnvMarks), strings.Join(out.EnvMarks, ","), out.RequestClaims)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
