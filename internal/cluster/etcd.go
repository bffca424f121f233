package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdConfig configures one embedded etcd member (`dsec etcd`); the fields are
// etcd's own flags.
type EtcdConfig struct {
	Name    string
	DataDir string
	// ListenClient and ListenPeer are comma-separated URLs; the advertised URLs
	// default to them.
	ListenClient, ListenPeer       string
	AdvertiseClient, AdvertisePeer string
	// InitialCluster is NAME=PEER_URL,...; default: this member alone.
	InitialCluster      string
	InitialClusterState string // "new" (default) or "existing"
	InitialClusterToken string
	// Client TLS (etcd's --cert-file, --key-file, --trusted-ca-file,
	// --client-cert-auth) and peer TLS (--peer-*).
	CertFile, KeyFile, TrustedCAFile             string
	ClientCertAuth                               bool
	PeerCertFile, PeerKeyFile, PeerTrustedCAFile string
	PeerClientCertAuth                           bool
	LogLevel                                     string // etcd's log level (default warn)
	// UnsafeNoFsync is etcd's --unsafe-no-fsync (benchmarks on shared disks only:
	// a crash loses data).
	UnsafeNoFsync bool
}

func urls(flag, s string) ([]url.URL, error) {
	var out []url.URL
	for _, p := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--%s %q: want URLs like http://10.0.0.1:2379", flag, p)
		}
		out = append(out, *u)
	}
	return out, nil
}

// RunEtcd runs the member until ctx ends or it fails.
func RunEtcd(ctx context.Context, c EtcdConfig, log *slog.Logger) error {
	if c.Name == "" || c.DataDir == "" || c.ListenClient == "" || c.ListenPeer == "" {
		return errors.New("dsec etcd needs --name, --data-dir, --listen-client and --listen-peer")
	}
	if c.AdvertiseClient == "" {
		c.AdvertiseClient = c.ListenClient
	}
	if c.AdvertisePeer == "" {
		c.AdvertisePeer = c.ListenPeer
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.DataDir
	var err error
	for _, f := range []struct {
		flag, val string
		dst       *[]url.URL
	}{
		{"listen-client", c.ListenClient, &cfg.ListenClientUrls},
		{"listen-peer", c.ListenPeer, &cfg.ListenPeerUrls},
		{"advertise-client", c.AdvertiseClient, &cfg.AdvertiseClientUrls},
		{"advertise-peer", c.AdvertisePeer, &cfg.AdvertisePeerUrls},
	} {
		if *f.dst, err = urls(f.flag, f.val); err != nil {
			return err
		}
	}
	cfg.InitialCluster = c.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(c.Name)
	}
	if c.InitialClusterState != "" {
		cfg.ClusterState = c.InitialClusterState
	}
	if c.InitialClusterToken != "" {
		cfg.InitialClusterToken = c.InitialClusterToken
	}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile, ClientCertAuth: c.ClientCertAuth}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: c.PeerCertFile, KeyFile: c.PeerKeyFile, TrustedCAFile: c.PeerTrustedCAFile, ClientCertAuth: c.PeerClientCertAuth}
	cfg.LogLevel = c.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		log.Info("etcd member ready", "name", c.Name, "client", c.AdvertiseClient, "peer", c.AdvertisePeer)
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil
	}
}

// ClientConfig says how to reach etcd.
type ClientConfig struct {
	// Endpoints is a comma-separated list of client URLs (or host:port).
	Endpoints string
	// TLS (etcdctl's --cacert, --cert, --key) and auth (--user NAME:PASSWORD).
	CAFile, CertFile, KeyFile string
	User                      string
	// Logger is the etcd client's own logger (nil: etcd's default, to stderr).
	Logger *zap.Logger
}

// Connect opens an etcd client and checks that the cluster answers.
func Connect(ctx context.Context, c ClientConfig) (*clientv3.Client, error) {
	var eps []string
	for _, e := range strings.Split(c.Endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("--etcd: no endpoints")
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, DialKeepAliveTime: 5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second, AutoSyncInterval: 30 * time.Second}
	if c.CAFile != "" || c.CertFile != "" {
		ti := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile}
		tc, err := ti.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tc
	} else {
		cfg.TLS = (*tls.Config)(nil)
	}
	if c.User != "" {
		u, p, _ := strings.Cut(c.User, ":")
		cfg.Username, cfg.Password = u, p
	}
	cfg.Context = ctx
	cfg.Logger = c.Logger
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(cctx, "/dsec-ping", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s does not answer: %w", c.Endpoints, err)
	}
	return cli, nil
}
