package mock_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestMockNetwork: without Egress the mock answers policies as a node with no
// policy manager; with it, a policy is kept and reported, a bad entry refused.
func TestMockNetwork(t *testing.T) {
	internet := api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}}
	plain, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.ValidateNetwork(internet); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Fatalf("internet without Egress: %v, want not_implemented", err)
	}
	if err := plain.ValidateNetwork(api.NetworkPolicy{}); err != nil {
		t.Fatalf("loopback only without Egress: %v", err)
	}

	d, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: t.TempDir(), Egress: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ValidateNetwork(api.NetworkPolicy{Allow: []string{"not an address/99"}}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("bad entry: %v, want invalid_argument", err)
	}
	ctx := context.Background()
	inst, err := d.Start(ctx, driver.Spec{ID: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Destroy(context.Background()) })
	n := inst.(driver.Networker)
	if st, err := n.Network(); err != nil || st != nil {
		t.Fatalf("before a policy: %+v %v, want none", st, err)
	}
	if err := n.SetNetwork(ctx, internet); err != nil {
		t.Fatal(err)
	}
	if st, err := n.Network(); err != nil || st == nil || !slices.Equal(st.Allow, internet.Allow) {
		t.Fatalf("after SetNetwork: %+v %v", st, err)
	}
}
