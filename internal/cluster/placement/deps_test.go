package placement

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/deptest"
)

// TestDependencies: the engine is a leaf the cluster tier plugs into; it must not
// reach the server, agent, session service or any driver.
func TestDependencies(t *testing.T) {
	const mod = "github.com/dsec-dev/dsec/"
	g, err := deptest.Load(".", "./...")
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	var above []string
	for _, b := range []string{"internal/agent", "internal/session", "internal/backend/driver", "internal/backend/container", "internal/frontend", "internal/app"} {
		above = append(above, mod+b)
	}
	bad := deptest.Under(above...)
	for _, pkg := range []string{mod + "internal/cluster/placement", mod + "internal/bench/placebench"} {
		if path := g.Path(pkg, bad); path != nil {
			t.Errorf("%s must not depend on %s (via %s)", pkg, path[len(path)-1], strings.Join(path, " → "))
		}
	}
}
