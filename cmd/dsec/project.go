package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// projectCmd administers projects and quotas through the API (DSEC_ADDR) with a
// token of the default project (DATA_DIR/token).
func projectCmd() *cobra.Command {
	asJSON := new(bool)
	c := &cobra.Command{
		Use:   "project",
		Short: "Projects: API tokens with quotas (max sandboxes, CPU, memory); needs a token of the default project",
	}
	c.PersistentFlags().BoolVar(asJSON, "json", false, "print JSON")
	printJSON := func(w io.Writer, v any) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	withToken := func(resp api.ProjectTokenResponse) error {
		if *asJSON {
			return printJSON(os.Stdout, resp)
		}
		fmt.Fprintf(os.Stderr, "project %s: new token %s (id %s); it is shown only now\n", resp.Project.Name, resp.Token, resp.TokenID)
		fmt.Println(resp.Token)
		return nil
	}
	quotaFlags := func(cmd *cobra.Command, q *api.Quota, mem *string) {
		cmd.Flags().Int64Var(&q.MaxSandboxes, "max-sandboxes", 0, "live sandboxes at most (0: unlimited)")
		cmd.Flags().Float64Var(&q.CPU, "cpu", 0, "total CPU cores of the live sandboxes (a create without --cpu counts 1; 0: unlimited)")
		cmd.Flags().StringVar(mem, "memory", "", "total memory of the live sandboxes, e.g. 64g (a create without --memory counts 512m; 0: unlimited)")
	}

	var cq api.Quota
	var cmem string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a project and print its first token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if cq.MemoryBytes, err = cliflag.ParseSize(cmem); err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			resp, err := cl.CreateProject(cmd.Context(), args[0], cq)
			if err != nil {
				return err
			}
			return withToken(resp)
		},
	}
	quotaFlags(create, &cq, &cmem)

	var sq api.Quota
	var smem string
	setQuota := &cobra.Command{
		Use:   "set-quota NAME",
		Short: "Replace a project's quota (flags left out are unlimited); its live sandboxes count at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if sq.MemoryBytes, err = cliflag.ParseSize(smem); err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			p, err := cl.SetQuota(cmd.Context(), args[0], sq)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(cmd.OutOrStdout(), p)
			}
			return printProjects(cmd.OutOrStdout(), []api.Project{p})
		},
	}
	quotaFlags(setQuota, &sq, &smem)

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List projects: quotas, usage, token IDs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ps, err := cl.Projects(cmd.Context())
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(cmd.OutOrStdout(), ps)
			}
			return printProjects(cmd.OutOrStdout(), ps)
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a project and its tokens (refused while it has sandboxes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			return cl.DeleteProject(cmd.Context(), args[0])
		},
	}
	token := &cobra.Command{Use: "token", Short: "Add or remove a project's tokens"}
	token.AddCommand(&cobra.Command{
		Use:   "add NAME",
		Short: "Add a token to a project and print it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			resp, err := cl.AddProjectToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return withToken(resp)
		},
	}, &cobra.Command{
		Use:   "rm NAME TOKEN_ID",
		Short: "Remove a token by the ID `dsec project ls` shows",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			return cl.RemoveProjectToken(cmd.Context(), args[0], args[1])
		},
	})
	c.AddCommand(create, ls, rm, setQuota, token, registryCmd(asJSON, printJSON))
	return c
}

// registryCmd sets and removes a project's registry credentials; the password
// is read from stdin only (never argv, which other users can see).
func registryCmd(asJSON *bool, printJSON func(io.Writer, any) error) *cobra.Command {
	reg := &cobra.Command{Use: "registry", Short: "Set or remove a project's registry credentials (used by its creates that fetch images from that registry)"}
	var user string
	var fromStdin bool
	set := &cobra.Command{
		Use:   "set NAME HOST --username USER --password-stdin",
		Short: "Store a project's credentials for registry HOST[:PORT] (docker.io for Docker Hub); the password is read from stdin",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if user == "" {
				return fmt.Errorf("--username is required")
			}
			if !fromStdin {
				return fmt.Errorf("--password-stdin is required: the password is read from stdin, never from the command line")
			}
			pw, err := readPassword(cmd.InOrStdin())
			if err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			p, err := cl.SetProjectRegistryAuth(cmd.Context(), args[0], args[1], api.RegistryAuth{Username: user, Password: pw})
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(cmd.OutOrStdout(), p)
			}
			return printProjects(cmd.OutOrStdout(), []api.Project{p})
		},
	}
	set.Flags().StringVar(&user, "username", "", "the registry user name")
	set.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the password (or token) from stdin (required)")
	reg.AddCommand(set, &cobra.Command{
		Use:   "rm NAME HOST",
		Short: "Remove a project's credentials for registry HOST",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			return cl.RemoveProjectRegistryAuth(cmd.Context(), args[0], args[1])
		},
	})
	return reg
}

// readPassword reads a password from r: its first line, without the line
// ending (as docker login --password-stdin).
func readPassword(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return "", fmt.Errorf("reading the password from stdin: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("no password on stdin")
	}
	return pw, nil
}

func printProjects(w io.Writer, ps []api.Project) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSANDBOXES\tCPU\tMEMORY\tTOKENS\tREGISTRIES")
	limit := func(used string, limited bool, max string) string {
		if !limited {
			return "-"
		}
		return used + "/" + max
	}
	for _, p := range ps {
		var ids []string
		for _, t := range p.Tokens {
			ids = append(ids, t.ID)
		}
		q, u := p.Quota, p.Usage
		regs := "-"
		if len(p.Registries) > 0 {
			regs = strings.Join(p.Registries, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name,
			limit(fmt.Sprint(u.Sandboxes), q.MaxSandboxes > 0, fmt.Sprint(q.MaxSandboxes)),
			limit(fmt.Sprintf("%g", u.CPU), q.CPU > 0, fmt.Sprintf("%g", q.CPU)),
			limit(cliflag.HumanBytes(u.MemoryBytes), q.MemoryBytes > 0, cliflag.HumanBytes(q.MemoryBytes)),
			strings.Join(ids, ","), regs)
	}
	return tw.Flush()
}
