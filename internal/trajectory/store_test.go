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

func boltFactory(mode trajectory.CommitMode) storetest.Factory {
	paths := map[trajectory.Store]string{}
	return storetest.Factory{
		Open: func(t *testing.T) trajectory.Store {
			p := filepath.Join(t.TempDir(), "trajectories.db")
			s, err := trajectory.OpenBolt(p, trajectory.BoltOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			paths[s] = p
			return s
		},
		Restart: func(t *testing.T, s trajectory.Store) trajectory.Store {
			p := paths[s]
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			n, err := trajectory.OpenBolt(p, trajectory.BoltOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			paths[n] = p
			return n
		},
	}
}

func TestBoltStore(t *testing.T)      { storetest.Run(t, boltFactory(trajectory.GroupCommit)) }
func TestBoltStoreBatch(t *testing.T) { storetest.Run(t, boltFactory(trajectory.BoltBatch)) }
func TestBoltStoreSolo(t *testing.T)  { storetest.Run(t, boltFactory(trajectory.Solo)) }
