package main

import (
	"time"

	"github.com/spf13/cobra"

	appapi "github.com/dsec-dev/dsec/internal/app/apiserver"
	"github.com/dsec-dev/dsec/internal/cluster"
)

// apiserverCmd runs a stateless API server of a cluster.
func apiserverCmd() *cobra.Command {
	var rc appapi.Config
	cfg := &rc.API
	var level string
	c := &cobra.Command{
		Use:   "apiserver",
		Short: "Run a stateless cluster API server: dsec's /v1 API, placement and routing to the nodes",
		Long: `Run one of any number of API servers of a dsec cluster. It serves dsec's /v1
API (same SDKs, same CLI), places new sandboxes on the nodes (power-of-k over the
registry in etcd), routes every other call to the node the sandbox ID names, and
keeps nothing of its own: API tokens live in etcd, so every API server accepts
the same ones. The first API server of a cluster writes its first token to
DATA_DIR/token. Besides /v1 it serves GET /metrics (the API tier's metrics:
requests, creates and their placement phase, rejections, re-placements, nodes
by state) and the dashboard at /ui/ (every node of the cluster), both with the
same tokens as /v1; --metrics-listen serves /metrics open on a listener of its
own. Environments (/v1/images) live in etcd: a compose through any API server
serves every node. FnCalls (/v1/fncall, SandboxFusion's /run_code and /submit)
go to the least loaded ready node that serves FnCall, elsewhere when it is
full, and answer resource_exhausted with Retry-After when none has room.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			cfg.Logger = log
			return appapi.Run(cmd.Context(), rc)
		},
	}
	f := c.Flags()
	etcdFlags(f, &rc.Etcd)
	f.StringVar(&rc.Listen, "listen", appapi.DefaultListen, "address to serve the API on")
	f.StringVar(&rc.MetricsListen, "metrics-listen", "", "also serve GET /metrics WITHOUT a token on this address (e.g. 127.0.0.1:9090 for a local Prometheus)")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector URL, e.g. http://127.0.0.1:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT; off when both are empty)")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/dsec-apiserver", "directory for DATA_DIR/token")
	f.StringVar(&rc.SecretFile, "cluster-secret-file", "", "file holding the cluster secret (mode 0600), the same on every agent and API server")
	f.StringVar(&cfg.BlobStore, "blob-store", "", "the cluster's shared blob store (s3://BUCKET?endpoint=... or dir:PATH on a mount every node shares): POST /v1/images checks layers there and names it in the manifest")
	f.StringVar(&cfg.E2BDomain, "e2b-domain", "", "sandbox domain of E2B's API: getHost(port) gives PORT-SANDBOXID.DOMAIN, which must reach this listener (wildcard DNS; DOMAIN may end in :PORT) (default localhost:PORT of --listen)")
	f.StringVar(&cfg.Name, "name", "", "this API server's name in logs (default apiserver@HOST)")
	f.IntVar(&cfg.Placement.K, "placement-k", 2, "power-of-k choices: nodes sampled per placement")
	f.IntVar(&cfg.Placement.MaxReplacements, "max-replacements", 3, "re-placements after nodes reject a sandbox")
	f.DurationVar(&cfg.Placement.RefreshInterval, "placement-refresh", 500*time.Millisecond, "period of the placement snapshot")
	f.DurationVar(&cfg.QuotaReconcile, "quota-reconcile", 30*time.Second, "how often quota reservations are reconciled with the nodes' sandboxes (only while some project has a quota)")
	f.DurationVar(&cfg.ElectionTTL, "election-ttl", cluster.DefaultElectionTTL, "lease TTL of the election of the API server that reconciles quotas: another takes over within it when that one dies")
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	return c
}
