package trajectory_test

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/trajtest"
)

func TestDecoratorMem(t *testing.T) {
	trajtest.Run(t, trajtest.FakeHarness(
		func(*testing.T) trajectory.Store { return trajectory.NewMem() },
		func(_ *testing.T, s trajectory.Store) trajectory.Store { s.(*trajectory.Mem).Restart(); return s }))
}

func TestDecoratorPebble(t *testing.T) {
	trajtest.Run(t, trajtest.FakeHarness(
		func(t *testing.T) trajectory.Store {
			s, err := trajectory.OpenPebble(filepath.Join(t.TempDir(), "traj"), trajectory.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		func(t *testing.T, s trajectory.Store) trajectory.Store {
			p := s.(interface{ Path() string }).Path()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			n, err := trajectory.OpenPebble(p, trajectory.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			return n
		}))
}
