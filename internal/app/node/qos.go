package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/reclaim"
)

// QoSConfig is the node's CPU-class and memory-reclaim configuration.
type QoSConfig struct {
	// CPUClassDefault is the class of creates naming none ("ls" or "be").
	CPUClassDefault string
	// LSCPUWeight, LSSlice and BESlice are the container driver's cpu weight
	// of the sandboxes' parent and scheduler slices of LS and BE threads (0: its defaults;
	// -1: the kernel's; container.Config).
	LSCPUWeight      int
	LSSlice, BESlice time.Duration
	// ZramBytes > 0 makes a compressed swap device of that size (dsec server
	// --swap zram:SIZE) that dsec creates at start and removes at shutdown.
	ZramBytes int64
	// IdleReclaimAfter pages out sandboxes idle this long (0: off).
	IdleReclaimAfter time.Duration
	// DAMONRoot, when set, is the DAMON sysfs root idle reclaim may own a
	// kdamond under (reclaim.DefaultDAMONRoot on a host that allows it); ""
	// leaves DAMON alone.
	DAMONRoot string
	// DAMONFS reads and writes DAMON's sysfs files (nil: the real files;
	// tests give a fake tree, internal/reclaim/damontest).
	DAMONFS reclaim.DAMONFS
}

// qos holds what the node set up for QoS and must undo at shutdown.
type qos struct {
	zram  *reclaim.Zram
	damon *reclaim.DAMON
}

// setupQoS validates cfg, creates the swap device and opens DAMON, filling the
// agent's QoS configuration.
func setupQoS(cfg QoSConfig, dataDir string) (*qos, agent.QoSConfig, error) {
	ac := agent.QoSConfig{DefaultCPUClass: cfg.CPUClassDefault, IdleReclaimAfter: cfg.IdleReclaimAfter}
	if cfg.CPUClassDefault != "" {
		if err := agent.CheckCPUClass(cfg.CPUClassDefault); err != nil {
			return nil, ac, fmt.Errorf("--cpu-class-default: %w", err)
		}
	}
	if cfg.IdleReclaimAfter < 0 {
		return nil, ac, errors.New("--idle-reclaim-after must not be negative")
	}
	size := cfg.ZramBytes
	if size != 0 && size < 1<<20 {
		return nil, ac, errors.New("--swap zram:SIZE: SIZE must be at least 1M")
	}
	q := &qos{}
	state := filepath.Join(dataDir, "swap.json")
	if size > 0 {
		z, err := reclaim.SetupZram(size, filepath.Join(dataDir, "dev"), state)
		if err != nil {
			return nil, ac, err
		}
		q.zram, ac.Swap, ac.SwapBytes = z, z.Node, z.Size
	} else if err := reclaim.RemoveStaleZram(state); err != nil {
		return nil, ac, err
	}
	switch {
	case cfg.DAMONRoot == "":
		ac.DAMONNote = "off (dsec server --damon-root)"
	case cfg.IdleReclaimAfter == 0:
		ac.DAMONNote = "off (needs --idle-reclaim-after)"
	default:
		d, err := reclaim.OpenDAMON(cfg.DAMONRoot, cfg.DAMONFS, filepath.Join(dataDir, "damon.json"), reclaim.DefaultDAMONScheme())
		if err != nil {
			ac.DAMONNote = err.Error()
		} else {
			q.damon, ac.DAMON = d, d
		}
	}
	return q, ac, nil
}

// close removes the swap device and dsec's kdamond.
func (q *qos) close() error {
	if q == nil {
		return nil
	}
	var errs []error
	if q.damon != nil {
		errs = append(errs, q.damon.Close())
	}
	if q.zram != nil {
		errs = append(errs, q.zram.Close())
	}
	return errors.Join(errs...)
}
