package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/client"
)

// infoCmd is `dsec info`: the node's /v1/info (backends, images, cgroup
// version, QoS, and the microVM acceleration with its reason) as JSON.
func infoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the node: backends, images, QoS, microVM acceleration (KVM or TCG, and why)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			info, err := cl.Info(cmd.Context())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(info)
		},
	}
}
