package fullvm

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/driver/drivertest"
)

// TestConformance runs the driver suite on leases of the shared VM (see
// leaseDriver): exec, streams, exit codes, credentials, tagged processes,
// signals, files, dial, pause/resume, terminals and re-adoption by a fresh
// driver go to the real guest.
func TestConformance(t *testing.T) {
	shared(t)
	drivertest.Run(t, func(t *testing.T) driver.Driver { return leaseDriver{real: sharedDrv} }, desktopLayers(t))
}
