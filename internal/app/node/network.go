package node

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/dsec-dev/dsec/internal/netpolicy"
)

// openNetwork opens the node's network policy manager (no kernel object is
// made until a sandbox asks for egress).
func openNetwork(cfg Config) (*netpolicy.Manager, error) {
	rules := netpolicy.RuleSets{}
	for _, def := range cfg.NetworkRules {
		if err := rules.Add(def); err != nil {
			return nil, fmt.Errorf("--network-rule: %w", err)
		}
	}
	var pool netip.Prefix
	if cfg.NetworkPool != "" {
		p, err := netip.ParsePrefix(cfg.NetworkPool)
		if err != nil {
			return nil, fmt.Errorf("--network-pool %q: %w", cfg.NetworkPool, err)
		}
		pool = p
	}
	m, err := netpolicy.New(netpolicy.Config{
		StateDir: filepath.Join(cfg.DataDir, "netpolicy"), Pool: pool, Rules: rules, DNS: cfg.NetworkDNS,
		NoHostCheck: cfg.NetworkNoHostCheck, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	cfg.Logger.Debug("network policy", "config", m.Describe())
	return m, nil
}
