package trajectory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// Store kinds a node may keep its log in.
const (
	KindPebble = "pebble" // default: DATA_DIR/trajectories/
	KindBolt   = "bolt"   // DATA_DIR/trajectories.db
)

// BoltFile and PebbleDir are where a node keeps its log under its data dir.
const (
	BoltFile  = "trajectories.db"
	PebbleDir = "trajectories"
)

// OpenNode opens a node's log under dataDir in the store of kind ("": pebble).
// Pebble takes over a bbolt log left by an earlier server: its trajectories are
// copied once and the file is renamed to trajectories.db.migrated.
func OpenNode(ctx context.Context, dataDir, kind string, log *slog.Logger) (Store, error) {
	if log == nil {
		log = slog.Default()
	}
	switch kind {
	case KindBolt:
		return OpenBolt(filepath.Join(dataDir, BoltFile))
	case "", KindPebble:
	default:
		return nil, fmt.Errorf("unknown trajectory store %q (pebble or bolt)", kind)
	}
	p, err := OpenPebble(filepath.Join(dataDir, PebbleDir), PebbleOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	old := filepath.Join(dataDir, BoltFile)
	if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	n, err := p.ImportBolt(ctx, old)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("migrating the trajectory log %s to %s: %w", old, p.Path(), err)
	}
	log.Info("trajectory log migrated from bbolt to pebble", "from", old, "to", p.Path(), "trajectories", n,
		"old_file", old+".migrated")
	return p, nil
}

// ImportBolt copies every trajectory of the bbolt log at path into p (steps
// that were running are imported as unknown), makes them durable and renames the
// file to path.migrated. It returns how many it copied.
func (p *Pebble) ImportBolt(ctx context.Context, path string) (int, error) {
	src, err := OpenBolt(path)
	if err != nil {
		return 0, err
	}
	n, err := p.importAll(ctx, src)
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return n, os.Rename(path, path+".migrated")
}

// importAll copies every trajectory of src into p and flushes.
func (p *Pebble) importAll(ctx context.Context, src Store) (int, error) {
	metas, err := src.List(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range metas {
		meta, steps, err := src.Get(ctx, m.ID)
		if err != nil {
			return 0, err
		}
		if err := p.Import(meta, steps); err != nil {
			return 0, err
		}
	}
	return len(metas), p.Flush()
}
