package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// dockerfileFlags are `dsec image build`'s Dockerfile build flags.
type dockerfileFlags struct {
	tag, file, target, network string
	buildArgs                  []string
}

func (f *dockerfileFlags) flags(c *cobra.Command) {
	c.Flags().StringVarP(&f.tag, "tag", "t", "", "Dockerfile build: the environment to write")
	c.Flags().StringVarP(&f.file, "file", "f", "", "Dockerfile build: the Dockerfile (default CONTEXT/Dockerfile)")
	c.Flags().StringVar(&f.target, "target", "", "Dockerfile build: build up to this stage")
	c.Flags().StringArrayVar(&f.buildArgs, "build-arg", nil, "Dockerfile build: KEY=VALUE for an ARG (repeatable)")
	c.Flags().StringVar(&f.network, "network", "none", "Dockerfile build: egress policy of the RUN steps: none, or comma-separated CIDR[:PORT[-PORT]], rule:NAME, domain:NAME, deny-domain:NAME")
}

// dockerfileName is where a Dockerfile from outside the context travels in
// the context tar.
const dockerfileName = ".dsec-build.Dockerfile"

// run sends the context and the Dockerfile to the server, prints the RUN
// steps' output while the build runs, then the steps.
func (f *dockerfileFlags) run(ctx context.Context, args []string) error {
	if f.tag == "" || len(args) != 1 {
		return errdefs.Invalid("dsec image build -t NAME [-f Dockerfile] CONTEXT: both -t and the context directory are required")
	}
	dir := args[0]
	// The RUN steps' output is printed as the server streams it.
	req := api.BuildImageRequest{Name: f.tag, Target: f.target, Output: os.Stdout}
	netp, err := api.ParseNetworkPolicy(f.network)
	if err != nil {
		return errdefs.Invalid("--network: %v", err)
	}
	req.Network = netp
	for _, kv := range f.buildArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			if v, ok = os.LookupEnv(kv); !ok { // docker build: --build-arg K takes K from the environment
				continue
			}
		}
		if req.BuildArgs == nil {
			req.BuildArgs = map[string]string{}
		}
		req.BuildArgs[k] = v
	}
	var extra map[string][]byte
	if f.file != "" {
		text, err := os.ReadFile(f.file)
		if err != nil {
			return errdefs.Invalid("Dockerfile: %v", err)
		}
		extra, req.Dockerfile = map[string][]byte{dockerfileName: text}, dockerfileName
	} else if _, err := os.Stat(filepath.Join(dir, "Dockerfile")); err != nil {
		return errdefs.Invalid("no Dockerfile in %s (name one with -f)", dir)
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(build.WriteContext(pw, dir, extra)) }()
	res, err := cl.BuildImage(ctx, req, pr)
	pr.Close()
	if err != nil {
		return err
	}
	for i, st := range res.Steps {
		fmt.Println(build.StepLine(i+1, st))
	}
	fmt.Printf("built %s: %d layers, %d bytes; %d of %d layer steps from the cache, %.2fs\n",
		res.Image.Name, len(res.Image.Layers), res.Image.Size, res.CacheHits, res.LayerSteps, res.Millis/1000)
	return nil
}
