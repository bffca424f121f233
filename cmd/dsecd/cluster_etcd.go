package main

import (
	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cluster"
)

// etcdCmd runs one embedded etcd member: a cluster's state store.
func etcdCmd() *cobra.Command {
	var c cluster.EtcdConfig
	var level string
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an etcd member (the cluster's state store) embedded in dsec",
		Long: `Run one member of the etcd cluster that holds a dsec cluster's state (nodes,
drain flags, API tokens). Three members on three machines survive the loss of
one. Any etcd cluster (e.g. Debian's etcd-server) works the same.

  dsec etcd --name e1 --data-dir /var/lib/dsec-etcd \
    --listen-client http://10.0.0.1:2379 --listen-peer http://10.0.0.1:2380 \
    --initial-cluster e1=http://10.0.0.1:2380,e2=http://10.0.0.2:2380,e3=http://10.0.0.3:2380`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			return cluster.RunEtcd(cmd.Context(), c, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Name, "name", "", "this member's name (as in --initial-cluster)")
	f.StringVar(&c.DataDir, "data-dir", "", "the member's data directory")
	f.StringVar(&c.ListenClient, "listen-client", "", "client URLs to listen on, comma-separated (etcd's --listen-client-urls)")
	f.StringVar(&c.ListenPeer, "listen-peer", "", "peer URLs to listen on (etcd's --listen-peer-urls)")
	f.StringVar(&c.AdvertiseClient, "advertise-client", "", "client URLs to advertise (default --listen-client)")
	f.StringVar(&c.AdvertisePeer, "advertise-peer", "", "peer URLs to advertise (default --listen-peer)")
	f.StringVar(&c.InitialCluster, "initial-cluster", "", "NAME=PEER_URL,... of every member (default: this member alone)")
	f.StringVar(&c.InitialClusterState, "initial-cluster-state", "new", "new, or existing to join a running cluster")
	f.StringVar(&c.InitialClusterToken, "initial-cluster-token", "dsec", "cluster token, the same on every member")
	f.StringVar(&c.CertFile, "cert-file", "", "client TLS certificate")
	f.StringVar(&c.KeyFile, "key-file", "", "client TLS key")
	f.StringVar(&c.TrustedCAFile, "trusted-ca-file", "", "CA of client certificates")
	f.BoolVar(&c.ClientCertAuth, "client-cert-auth", false, "require client certificates")
	f.StringVar(&c.PeerCertFile, "peer-cert-file", "", "peer TLS certificate")
	f.StringVar(&c.PeerKeyFile, "peer-key-file", "", "peer TLS key")
	f.StringVar(&c.PeerTrustedCAFile, "peer-trusted-ca-file", "", "CA of peer certificates")
	f.BoolVar(&c.PeerClientCertAuth, "peer-client-cert-auth", false, "require peer certificates")
	f.StringVar(&c.LogLevel, "etcd-log-level", "warn", "etcd's own log level")
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// etcdFlags adds the flags of an etcd client (agents, API servers, nodes).
func etcdFlags(f interface {
	StringVar(p *string, name, value, usage string)
}, c *cluster.ClientConfig) {
	f.StringVar(&c.Endpoints, "etcd", "http://127.0.0.1:2379", "etcd client URLs, comma-separated")
	f.StringVar(&c.CAFile, "etcd-cacert", "", "CA of etcd's TLS certificate")
	f.StringVar(&c.CertFile, "etcd-cert", "", "client certificate for etcd")
	f.StringVar(&c.KeyFile, "etcd-key", "", "client key for etcd")
	f.StringVar(&c.User, "etcd-user", "", "etcd auth as NAME:PASSWORD")
}
