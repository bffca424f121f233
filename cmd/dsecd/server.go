package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/reclaim"
)

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func serverCmd() *cobra.Command {
	var sc daemon.ServerConfig
	cfg := &sc.Config
	var level string
	c := &cobra.Command{
		Use:   "server",
		Short: "Run the node server (API + node agent) in the foreground",
		Long: `Run dsec's API and node agent. Sandboxes outlive the server: a restarted server
(even after kill -9) re-adopts them. The API token is read from --token, else
DATA_DIR/token, which is created on first start.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			if cfg.Token == "" {
				cfg.Token = os.Getenv("DSEC_SERVER_TOKEN")
			}
			cfg.Logger = log
			return daemon.Run(cmd.Context(), sc)
		},
	}
	f := c.Flags()
	f.StringVar(&sc.Listen, "listen", daemon.DefaultListen, "address to serve the API on")
	f.StringVar(&sc.SandboxFusionListen, "sandboxfusion-listen", "", "also serve SandboxFusion's /run_code, /submit and /run_jupyter on this address WITHOUT a token (off by default; trusted networks only)")
	f.StringVar(&sc.MetricsListen, "metrics-listen", "", "also serve Prometheus metrics (GET /metrics) on this address WITHOUT a token (off by default; the API listener serves them with the token)")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector URL, e.g. http://127.0.0.1:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT; off when both are empty)")
	f.StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir, "directory for state and the token")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "image directory (default $DSEC_IMAGES_DIR or "+daemon.DefaultImagesDir+")")
	f.StringVar(&cfg.E2BDomain, "e2b-domain", "", "sandbox domain of E2B's API: getHost(port) gives PORT-SANDBOXID.DOMAIN, which must reach this listener (wildcard DNS; DOMAIN may end in :PORT) (default localhost:PORT of --listen)")
	f.StringVar(&cfg.DefaultImage, "default-image", daemon.DefaultImage, "image for requests that name none")
	f.StringVar(&cfg.Token, "token", "", "API token (default: $DSEC_SERVER_TOKEN, else DATA_DIR/token)")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 0, "admission limit (default 100000)")
	f.IntVar(&cfg.WarmPool, "warm-pool", 0, "keep this many sandboxes started ahead of the creates that take them: the default create's, or those of a steady workload's shape; a create that would make the same sandbox takes one (0: none)")
	f.IntVar(&cfg.MaxFork, "max-fork", 0, "most children one fork may ask for (default 64)")
	f.StringArrayVar(&cfg.NetworkRules, "network-rule", nil, "egress rule set NAME=CIDR[:PORT[-PORT]][,...] sandboxes may name in their network policy (repeatable)")
	f.StringVar(&cfg.NetworkDNS, "network-dns", "", "resolver (ADDR[:PORT]) the node's DNS forwarder asks for egress sandboxes, whose every DNS query it answers (default: the first nameserver of /etc/resolv.conf; off: no forwarder, no domain rules)")
	f.BoolVar(&cfg.NetworkNoHostCheck, "network-no-host-check", false, "let flows to ports 80/443 that a domain rule admits through by the learned address alone, without checking their TLS SNI or HTTP Host against the rules")
	f.StringVar(&cfg.NetworkPool, "network-pool", "", "private IPv4 range for sandbox links, a /31 per egress sandbox (default "+netpolicy.DefaultPool.String()+")")
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's name, part of every sandbox ID it creates (a-z, 0-9, '-'; default: the host name)")
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&cfg.Registries.DockerConfig, "registry-config", "", "Docker config.json whose \"auths\" give credentials per registry for images named by reference (default: anonymous)")
	f.StringVar(&cfg.Registries.HostsDir, "registry-hosts-dir", "", "containerd hosts directory: DIR/HOST/hosts.toml lists mirrors of HOST (e.g. DIR/docker.io/hosts.toml), tried before the registry itself")
	f.StringArrayVar(&cfg.Registries.Insecure, "insecure-registry", nil, "HOST[:PORT] of a registry reached over plain HTTP (repeatable; any other registry is HTTPS only)")
	f.Var(imageCacheBytes(&cfg.ImageCacheBytes), "image-cache-bytes", imageCacheBytesUsage)
	cfg.BuildCacheBytes = build.DefaultCacheBudget
	f.Var(imageCacheBytes(&cfg.BuildCacheBytes), "build-cache-bytes", buildCacheBytesUsage)
	f.StringVar(&cfg.BlobStore, "blob-store", "", "blob store of environments whose manifest names none (default dir:DATA_DIR/blobs)")
	f.StringVar(&cfg.LayerPrefetch, "layer-prefetch", "", `"" loads layers on demand; "full" fetches and verifies whole layers before mounting`)
	f.BoolVar(&cfg.Layers.MetaPrefetch, "layer-meta-prefetch", false, "fetch each layer's metadata chunks (inodes, directories, small files; recorded in its chunk index at build) in the background when this node mounts it")
	f.DurationVar(&cfg.Layers.StoreWait, "layer-store-wait", 0, "how long a read of an uncached layer chunk waits for a failing blob store before EIO (0: 2m; negative: fail at once)")
	f.StringArrayVar(&cfg.Devices, "device", nil, "add a device node and device-cgroup rule to every sandbox: NAME:TYPE:MAJOR:MINOR[:ACCESS], e.g. fuse:c:10:229 (repeatable)")
	f.Int64Var(&cfg.MaxLogBytes, "max-log-bytes", 0, "cap of each background process log on disk, stdout and stderr each (default 64 MiB)")
	f.DurationVar(&cfg.KeepAlive, "keepalive", 0, "how long a blocking exec or process wait stays silent before its answer starts and whitespace keeps the connection busy (default 15s; negative: never)")
	f.Var(onOff{&cfg.UserNS}, "userns", "on: container sandboxes that do not say otherwise (create's user_namespace) run in a user namespace of their own, sandbox root an unprivileged host uid; off (default)")
	f.BoolVar(&cfg.NoFavorDynMods, "no-cgroup-favordynmods", false, "on a cgroup v1 host, leave the cgroups as they are: by default the node turns on the kernel's favordynmods (host-wide; Linux 6.18 keeps it until reboot) so that a create joins its cgroups in 0.1 ms instead of waiting about 5 ms for an RCU grace period")
	f.BoolVar(&cfg.NoVMSnapshots, "no-vm-snapshots", false, "boot every microVM: no snapshot of a launch is taken or restored from")
	gpuFlags(f, cfg)
	f.BoolVar(&sc.CleanupOnExit, "cleanup-on-exit", false, "delete every sandbox when the server stops")
	f.DurationVar(&cfg.TrajMaxAge, "traj-max-age", daemon.DefaultTrajMaxAge, "delete trajectories not updated for this long (negative: never)")
	f.IntVar(&cfg.TrajMax, "traj-max", daemon.DefaultTrajMax, "keep at most this many trajectories, the most recently updated (negative: no limit)")
	f.StringVar(&cfg.QoS.CPUClassDefault, "cpu-class-default", "ls", `CPU class of sandboxes created without one: "ls" (latency-sensitive) or "be" (best-effort)`)
	f.Var(swapFlag{&cfg.QoS.ZramBytes}, "swap", "zram:SIZE creates a compressed swap device (e.g. zram:4G) that dsec owns and removes at shutdown; pause --reclaim then pushes anonymous memory into it")
	f.DurationVar(&cfg.QoS.IdleReclaimAfter, "idle-reclaim-after", 0, "page out the memory of sandboxes idle this long, one at a time (0: off)")
	f.StringVar(&cfg.QoS.DAMONRoot, "damon-root", "", "DAMON sysfs root idle reclaim may own a kdamond under (e.g. "+reclaim.DefaultDAMONRoot+"); refused when kdamonds dsec did not create exist")
	f.StringVar(&cfg.TrajStore, "traj-store", "pebble", "trajectory log store: pebble (DATA_DIR/trajectories/, migrates an old trajectories.db once) or bolt (DATA_DIR/trajectories.db)")
	return c
}

// onOff is a flag that takes on or off (also true/false).
type onOff struct{ v *bool }

func (o onOff) String() string {
	if o.v != nil && *o.v {
		return "on"
	}
	return "off"
}

func (o onOff) Set(s string) error {
	switch s {
	case "on", "true", "1":
		*o.v = true
	case "off", "false", "0":
		*o.v = false
	default:
		return fmt.Errorf("want on or off, not %q", s)
	}
	return nil
}

func (onOff) Type() string { return "on|off" }
