package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/session"
)

// Registration defaults.
const (
	// DefaultTTL is the node lease's TTL: a node that stops renewing is lost
	// after at most this long (plus etcd's own lease granularity).
	DefaultTTL = 10 * time.Second
	// DefaultReportInterval is how often an agent publishes its load.
	DefaultReportInterval = 2 * time.Second
)

// RegisterConfig configures an agent's registration.
type RegisterConfig struct {
	Client *clientv3.Client
	Prefix string // default DefaultPrefix
	Secret Secret
	// TTL of the node's lease (default DefaultTTL, at least 2 s).
	TTL time.Duration
	// ReportInterval (default DefaultReportInterval) between load reports.
	ReportInterval time.Duration
	// Report returns the node's current record; Name and Addr must stay the same.
	Report func(ctx context.Context) (NodeRecord, error)
	Logger *slog.Logger
}

// Register keeps the node registered until ctx ends: it grants a lease, puts the
// node's signed record under it (and, without a lease, under n/known/), renews the
// lease and re-puts the record every ReportInterval. When the lease is lost (etcd
// unreachable for longer than the TTL, so the cluster counted the node lost) it
// grants a new one and registers again. On return the lease is revoked, so the
// node shows as lost at once. The first registration's error is returned at
// once; later ones are logged and retried.
func Register(ctx context.Context, cfg RegisterConfig) error {
	if cfg.Client == nil || cfg.Report == nil || cfg.Secret.IsZero() {
		return errors.New("cluster: Register needs Client, Report and Secret")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	cfg.TTL = max(cfg.TTL, 2*time.Second)
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &registrar{cfg: cfg, k: newKeys(cfg.Prefix)}
	lease, err := r.register(ctx)
	if err != nil {
		return err
	}
	go r.run(ctx, lease)
	return nil
}

type registrar struct {
	cfg RegisterConfig
	k   keys
}

// register grants a lease and puts the record under it.
func (r *registrar) register(ctx context.Context) (clientv3.LeaseID, error) {
	rec, err := r.cfg.Report(ctx)
	if err != nil {
		return 0, fmt.Errorf("cluster: node report: %w", err)
	}
	if err := session.CheckNodeName(rec.Name); err != nil {
		return 0, fmt.Errorf("cluster: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	g, err := r.cfg.Client.Grant(cctx, int64(r.cfg.TTL/time.Second))
	if err != nil {
		return 0, fmt.Errorf("cluster: lease: %w", err)
	}
	if err := r.put(cctx, g.ID, rec, true); err != nil {
		return 0, err
	}
	r.cfg.Logger.Info("node registered", "node", rec.Name, "addr", rec.Addr, "lease", fmt.Sprintf("%x", int64(g.ID)), "ttl", r.cfg.TTL)
	return g.ID, nil
}

func (r *registrar) put(ctx context.Context, lease clientv3.LeaseID, rec NodeRecord, known bool) error {
	rec.ReportedAt = time.Now()
	b, err := r.cfg.Secret.seal(rec)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(r.k.live(rec.Name), string(b), clientv3.WithLease(lease))}
	if known {
		ops = append(ops, clientv3.OpPut(r.k.known(rec.Name), string(b)))
	}
	if _, err := r.cfg.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("cluster: put node record: %w", err)
	}
	return nil
}

// run renews and reports until ctx ends, re-registering after a lost lease.
func (r *registrar) run(ctx context.Context, lease clientv3.LeaseID) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = r.cfg.Client.Revoke(cctx, lease)
	}()
	for ctx.Err() == nil {
		r.keep(ctx, lease)
		for ctx.Err() == nil {
			l, err := r.register(ctx)
			if err == nil {
				lease = l
				break
			}
			r.cfg.Logger.Warn("re-registering the node failed; retrying", "err", err)
			sleep(ctx, time.Second)
		}
	}
}

// keep renews lease and re-puts the record until the lease is gone or ctx ends.
func (r *registrar) keep(ctx context.Context, lease clientv3.LeaseID) {
	t := time.NewTicker(r.cfg.ReportInterval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.ReportInterval)
		_, err := r.cfg.Client.KeepAliveOnce(cctx, lease)
		if err == nil {
			var rec NodeRecord
			rec, err = r.cfg.Report(cctx)
			if err == nil {
				err = r.put(cctx, lease, rec, false)
			}
		}
		cancel()
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || time.Since(lastOK) > r.cfg.TTL:
			r.cfg.Logger.Warn("node lease lost; registering again", "err", err)
			return
		default:
			r.cfg.Logger.Warn("node report failed", "err", err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
