package main

import (
	"encoding/json"
	"fmt"
	"io"

	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/pkg/api"
)

// doctorCmd is `dsec doctor`: this host's features (the same probe GET /v1/info
// reports as "host"), each with what is degraded without it. It needs no
// server; it exits 1 when a required feature is missing.
func doctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host's features (cgroups, EROFS, FUSE resend, idmapped mounts, user namespaces, nftables, KSM, swap, KVM) and what is degraded without each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := hostfeat.Local()
			feats := h.Probe()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(feats); err != nil {
					return err
				}
			} else {
				writeDoctor(cmd.OutOrStdout(), h.Release, feats)
			}
			for _, f := range feats {
				if f.Required && !f.Available {
					cmd.SilenceUsage = true
					return fmt.Errorf("required host feature %s missing: %s", f.Name, f.Detail)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the features as JSON")
	return cmd
}

// writeDoctor prints one line per feature and, under each missing one, what is
// degraded.
func writeDoctor(w io.Writer, release string, feats []api.HostFeature) {
	fmt.Fprintf(w, "kernel %s\n", release)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range feats {
		mark := "ok"
		if !f.Available {
			mark = "missing"
			if f.Required {
				mark = "MISSING (required)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, mark, f.Detail)
		if !f.Available {
			fmt.Fprintf(tw, "\t\twithout it: %s\n", f.Degraded)
		}
	}
	tw.Flush()
}
