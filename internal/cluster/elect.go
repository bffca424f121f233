package cluster

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultElectionTTL is the lease TTL of an elected task's session: when the
// process that leads dies, another one takes over at most this long after.
const DefaultElectionTTL = 10 * time.Second

// ElectionConfig configures RunElected.
type ElectionConfig struct {
	Client *clientv3.Client
	Prefix string // default DefaultPrefix
	// Task names the election (key elect/TASK/ under the prefix).
	Task string
	// ID is this candidate's value, shown as the leader (for example the API
	// server's name and process ID).
	ID string
	// TTL of the candidate's session lease (default DefaultElectionTTL, at
	// least 2 s).
	TTL    time.Duration
	Logger *slog.Logger
}

// electionKey is the prefix of task's election.
func (k keys) election(task string) string { return k.prefix + "elect/" + task }

// Leader returns the ID of task's current leader ("" and false: none).
func Leader(ctx context.Context, cli *clientv3.Client, prefix, task string) (string, bool, error) {
	r, err := cli.Get(ctx, newKeys(prefix).election(task)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, err
	}
	if len(r.Kvs) == 0 {
		return "", false, nil
	}
	return string(r.Kvs[0].Value), true, nil
}

// RunElected runs lead on one candidate at a time among every process that
// calls RunElected for the same task: etcd's election recipe
// (client/v3/concurrency) over a session lease, nothing home-made. lead gets a
// context that ends when this candidate stops leading (its session's lease is
// lost, e.g. etcd unreachable beyond the TTL) or ctx ends; RunElected then
// campaigns again. A candidate that dies keeps its lease until the TTL runs
// out, so another takes over within TTL. RunElected returns when ctx ends,
// resigning if it leads.
func RunElected(ctx context.Context, cfg ElectionConfig, lead func(ctx context.Context)) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultElectionTTL
	}
	cfg.TTL = max(cfg.TTL, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	key := newKeys(cfg.Prefix).election(cfg.Task)
	log := cfg.Logger.With("task", cfg.Task, "candidate", cfg.ID)
	for ctx.Err() == nil {
		if err := campaign(ctx, cfg, key, log, lead); err != nil && ctx.Err() == nil {
			log.Warn("election: campaign failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// campaign runs one session: campaign, lead until the session or ctx ends.
func campaign(ctx context.Context, cfg ElectionConfig, key string, log *slog.Logger, lead func(context.Context)) error {
	s, err := concurrency.NewSession(cfg.Client, concurrency.WithTTL(int(cfg.TTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() { // revoke the lease (even after ctx ended): the next candidate takes over at once
		s.Orphan()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = cfg.Client.Revoke(rctx, s.Lease())
	}()
	e := concurrency.NewElection(s, key)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a session lost while campaigning ends the campaign
		select {
		case <-s.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := e.Campaign(cctx, cfg.ID); err != nil {
		return err
	}
	log.Info("election: leading")
	lead(cctx)
	log.Info("election: no longer leading")
	return nil
}
