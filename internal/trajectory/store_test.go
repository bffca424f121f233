package trajectory_test

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/storetest"
	"github.com/dsec-dev/dsec/internal/trajectory/trajtest"
)

// The stores: each runs the store conformance suite (storetest) and the
// decorator conformance suite (trajtest, over the node agent on the mock driver).

func memFactory() storetest.Factory {
	return storetest.Factory{
		Open: func(t *testing.T) trajectory.Store { return trajectory.NewMem() },
		Restart: func(t *testing.T, s trajectory.Store) trajectory.Store {
			s.(*trajectory.Mem).Restart()
			return s
		},
	}
}

func boltFactory() storetest.Factory {
	return diskFactory("trajectories.db", func(p string) (trajectory.Store, error) { return trajectory.OpenBolt(p) })
}

func pebbleFactory() storetest.Factory {
	return diskFactory("trajectories", func(p string) (trajectory.Store, error) {
		// Small memtables: the suite also crosses memtable flushes.
		return trajectory.OpenPebble(p, trajectory.PebbleOptions{MemTableSize: 1 << 20})
	})
}

func TestMemStore(t *testing.T)    { storetest.Run(t, memFactory()) }
func TestBoltStore(t *testing.T)   { storetest.Run(t, boltFactory()) }
func TestPebbleStore(t *testing.T) { storetest.Run(t, pebbleFactory()) }

func decorator(t *testing.T, f storetest.Factory) {
	trajtest.Run(t, trajtest.NodeHarness(f.Open, f.Restart))
}

func TestDecoratorMem(t *testing.T)    { decorator(t, memFactory()) }
func TestDecoratorBolt(t *testing.T)   { decorator(t, boltFactory()) }
func TestDecoratorPebble(t *testing.T) { decorator(t, pebbleFactory()) }

// diskFactory is the Factory of a store kept at path name in a test's temp
// dir; Restart closes it and opens the same path.
func diskFactory(name string, open func(path string) (trajectory.Store, error)) storetest.Factory {
	paths := map[trajectory.Store]string{}
	openAt := func(t *testing.T, p string) trajectory.Store {
		s, err := open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		paths[s] = p
		return s
	}
	return storetest.Factory{
		Open: func(t *testing.T) trajectory.Store { return openAt(t, filepath.Join(t.TempDir(), name)) },
		Restart: func(t *testing.T, s trajectory.Store) trajectory.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return openAt(t, paths[s])
		},
	}
}
