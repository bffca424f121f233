package trajectory_test

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		Open: func(t *testing.T) trajectory.Store { return trajectory.NewMem() },
		Restart: func(t *testing.T, s trajectory.Store) trajectory.Store {
			s.(*trajectory.Mem).Restart()
			return s
		},
	})
}

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

func boltFactory(mode trajectory.CommitMode) storetest.Factory {
	return diskFactory("trajectories.db", func(p string) (trajectory.Store, error) {
		return trajectory.OpenBolt(p, trajectory.BoltOptions{Mode: mode})
	})
}

func TestBoltStore(t *testing.T)      { storetest.Run(t, boltFactory(trajectory.GroupCommit)) }
func TestBoltStoreBatch(t *testing.T) { storetest.Run(t, boltFactory(trajectory.BoltBatch)) }
func TestBoltStoreSolo(t *testing.T)  { storetest.Run(t, boltFactory(trajectory.Solo)) }

func TestPebbleStore(t *testing.T) {
	storetest.Run(t, diskFactory("trajectories", func(p string) (trajectory.Store, error) {
		// Small memtables: the suite also crosses memtable flushes.
		return trajectory.OpenPebble(p, trajectory.PebbleOptions{MemTableSize: 1 << 20})
	}))
}
