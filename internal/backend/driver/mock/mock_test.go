package mock_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
)

// factory returns mock drivers on one host and state dir, like an agent that
// restarts on the same machine.
func factory(t testing.TB, pause bool) func(t *testing.T) driver.Driver {
	host, dir := mock.NewHost(), t.TempDir()
	return func(t *testing.T) driver.Driver {
		d, err := mock.New(mock.Config{Host: host, StateDir: dir, Pause: pause})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// TestMockConformance runs the driver conformance suite on the mock, as any
// user (no root, no images).
func TestMockConformance(t *testing.T) {
	drivertest.Run(t, factory(t, false), nil)
}

// TestMockPauseConformance: with Pause the mock claims the capability and its
// stopped processes pass the suite's pause checks.
func TestMockPauseConformance(t *testing.T) {
	drivertest.Run(t, factory(t, true), nil)
}

func BenchmarkPTY(b *testing.B) {
	d, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	drivertest.BenchPTY(b, d, nil)
}
