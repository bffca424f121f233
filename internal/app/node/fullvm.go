package node

import (
	"path/filepath"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/fullvm"
)

// fullVMDriver is the fullvm backend when its base image exists
// (scripts/fullvm-image.sh, run by setup), else nothing.
func fullVMDriver(cfg Config) []driver.Driver {
	if err := fullvm.Available(cfg.ImagesDir); err != nil {
		cfg.Logger.Info("fullvm backend not available: no base image (scripts/fullvm-image.sh)", "err", err)
		return nil
	}
	d, err := fullvm.New(fullvm.Config{StateDir: filepath.Join(cfg.DataDir, "fullvm"), Logger: cfg.Logger})
	if err != nil {
		cfg.Logger.Warn("fullvm backend not available", "err", err)
		return nil
	}
	return []driver.Driver{d}
}
