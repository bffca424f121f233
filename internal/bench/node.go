package bench

import (
	"context"
	"io"
	"log/slog"
	"os"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
)

// Options are shared by every benchmark.
type Options struct {
	N        int
	Parallel int
	Image    string
	// UserNS is create's user_namespace for `bench create`: "on", "off",
	// "both" (alternate, interleaved in one run, and compare) or "" (the
	// node's default).
	UserNS string
	// DataDir is a scratch directory for the benchmark's own node; default a new
	// directory under /var/lib/dsec, removed afterwards.
	DataDir string
	Logger  *slog.Logger
}

func (o *Options) defaults() {
	if o.N <= 0 {
		o.N = 100
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// openNode starts a private node for a benchmark. The returned cleanup deletes its
// sandboxes and its data dir.
func openNode(ctx context.Context, o Options, mods ...func(*daemon.Config)) (*daemon.Daemon, func(), error) {
	dir := o.DataDir
	owned := false
	if dir == "" {
		if err := os.MkdirAll("/var/lib/dsec", 0o700); err != nil {
			return nil, nil, err
		}
		d, err := os.MkdirTemp("/var/lib/dsec", "bench-")
		if err != nil {
			return nil, nil, err
		}
		dir, owned = d, true
	}
	cfg := daemon.Config{DataDir: dir, DefaultImage: o.Image, Logger: o.Logger, Token: "bench"}
	for _, mod := range mods {
		mod(&cfg)
	}
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		if owned {
			os.RemoveAll(dir)
		}
		return nil, nil, err
	}
	return d, func() {
		_ = d.Shutdown(context.Background(), true)
		if owned {
			os.RemoveAll(dir)
		}
	}, nil
}
