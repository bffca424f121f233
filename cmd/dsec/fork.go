package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// forkCmd is `dsec fork ID --count N`: it prints the children's IDs, one a line.
func forkCmd() *cobra.Command {
	var count int
	var asJSON bool
	c := &cobra.Command{
		Use:   "fork ID",
		Short: "Make N sandboxes that start from a sandbox's current file system (processes are not copied)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			res, err := cl.Fork(cmd.Context(), args[0], api.ForkRequest{Count: count})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(res)
			}
			for _, ch := range res.Children {
				fmt.Println(ch.ID)
			}
			return nil
		},
	}
	c.Flags().IntVar(&count, "count", 1, "number of children")
	c.Flags().BoolVar(&asJSON, "json", false, "print the whole result as JSON")
	return c
}

// commitCmd is `dsec commit ID --name ENV`.
func commitCmd() *cobra.Command {
	var req api.CommitRequest
	c := &cobra.Command{
		Use:   "commit ID",
		Short: "Pack a sandbox's writable layer into a new environment (caches and build residue left out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			res, err := cl.Commit(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return printJSON(res)
		},
	}
	c.Flags().StringVar(&req.Name, "name", "", "name of the new environment (required)")
	c.Flags().StringArrayVar(&req.Exclude, "exclude", nil, "also leave out this path (/abs/path) or base-name pattern (*.log); repeatable")
	c.Flags().BoolVar(&req.NoDefaultExclude, "no-default-exclude", false, "do not leave out /tmp, caches and build residue")
	_ = c.MarkFlagRequired("name")
	return c
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
