package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/app/agent"
	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/image/build"
)

// agentCmd runs a cluster node: the node agent served over the node RPC and
// registered in etcd.
func agentCmd() *cobra.Command {
	var ac agent.Config
	cfg := &ac.Node
	var level, labels string
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run a cluster node: the node agent, registered in etcd, serving API servers over RPC",
		Long: `Run one node of a dsec cluster. The agent owns this machine's sandboxes (they
outlive it: a restarted agent re-adopts them), admits or rejects what API servers
place here (--max-sandboxes), serves them over the node RPC on --listen
(authenticated with the cluster secret), and keeps a record of itself in etcd
under a lease of --ttl, renewed with its load every 2 s. A node that stops
renewing is lost after the TTL: its sandboxes answer node_lost until it is back.
GET /metrics on --listen serves the node's own metrics behind the node's API
token (DATA_DIR/token: a static bearer token a Prometheus scraper can hold,
unlike the node RPC's short-lived signed ones); --metrics-listen serves them
open on a listener of their own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			cfg.Logger = log
			if ac.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			return agent.Run(cmd.Context(), ac)
		},
	}
	f := c.Flags()
	etcdFlags(f, &ac.Etcd)
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's name, part of every sandbox ID it creates (a-z, 0-9, '-')")
	f.StringVar(&ac.Listen, "listen", agent.DefaultListen, "address to serve the node RPC on")
	f.StringVar(&ac.Advertise, "advertise", "", "HOST:PORT API servers reach the node RPC at (default --listen)")
	f.StringVar(&ac.SecretFile, "cluster-secret-file", "", "file holding the cluster secret (mode 0600), the same on every agent and API server")
	f.StringVar(&ac.MetricsListen, "metrics-listen", "", "also serve GET /metrics WITHOUT a token on this address (e.g. 127.0.0.1:9090 for a local Prometheus)")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector URL (default $OTEL_EXPORTER_OTLP_ENDPOINT; off when both are empty)")
	f.StringVar(&labels, "labels", "", "node labels KEY=VALUE,... that creates may constrain on (--constraint)")
	f.DurationVar(&ac.TTL, "ttl", cluster.DefaultTTL, "lease TTL: the node counts as lost this long after it stops renewing (its claims of layers it fetches for the cluster lapse with it)")
	f.StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir, "directory for the node's state")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "image directory (default $DSEC_IMAGES_DIR or "+daemon.DefaultImagesDir+")")
	f.StringVar(&cfg.DefaultImage, "default-image", daemon.DefaultImage, "image for requests that name none")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 1000, "admission limit: creates beyond it are rejected and placed elsewhere")
	f.IntVar(&cfg.WarmPool, "warm-pool", 0, "keep this many sandboxes started ahead of the creates that take them: the default create's, or those of a steady workload's shape; a create that would make the same sandbox takes one (0: none)")
	f.StringVar(&cfg.Registries.DockerConfig, "registry-config", "", "Docker config.json whose \"auths\" give credentials per registry for images named by reference (default: anonymous)")
	f.StringVar(&cfg.Registries.HostsDir, "registry-hosts-dir", "", "containerd hosts directory: DIR/HOST/hosts.toml lists mirrors of HOST (e.g. DIR/docker.io/hosts.toml), tried before the registry itself")
	f.StringArrayVar(&cfg.Registries.Insecure, "insecure-registry", nil, "HOST[:PORT] of a registry reached over plain HTTP (repeatable; any other registry is HTTPS only)")
	f.Var(imageCacheBytes(&cfg.ImageCacheBytes), "image-cache-bytes", imageCacheBytesUsage)
	cfg.BuildCacheBytes = build.DefaultCacheBudget
	f.Var(imageCacheBytes(&cfg.BuildCacheBytes), "build-cache-bytes", buildCacheBytesUsage)
	f.Var(imageCacheBytes(&cfg.BlobStoreBytes), "blob-store-bytes", blobStoreBytesUsage)
	f.StringVar(&cfg.BlobStore, "blob-store", "", "blob store of environments whose manifest names none, and where commits put their layers: in a cluster, the blob store every node shares (s3://... or dir:PATH on a shared mount; default dir:DATA_DIR/blobs)")
	f.IntVar(&cfg.MaxFnCalls, "max-fncalls", 64, "FnCalls this node runs or queues at once; more are refused and placed on another node")
	f.BoolVar(&cfg.NoFnCall, "no-fncall", false, "serve no FnCalls (the node does not advertise the fncall backend)")
	gpuFlags(f, cfg)
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	return c
}

// parseLabels parses KEY=VALUE,... with the placement engine's label syntax.
func parseLabels(s string) (map[string]string, error) {
	cs, err := placement.ParseConstraints(s)
	if err != nil {
		return nil, fmt.Errorf("--labels: %w", err)
	}
	return constraintMap(cs), nil
}

func constraintMap(cs []placement.Constraint) map[string]string {
	if len(cs) == 0 {
		return nil
	}
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.Key] = c.Value
	}
	return m
}
