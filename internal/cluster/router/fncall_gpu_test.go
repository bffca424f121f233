package router

import (
	"context"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestFnCallGPUGoesToGPUNodes: a FnCall of device "gpu" runs only on a node
// that advertises the hardware, CPU FnCalls still spread over every FnCall
// node, and with no GPU node left a GPU call is not_implemented (not a
// "no room, retry" error), naming the device.
func TestFnCallGPUGoesToGPUNodes(t *testing.T) {
	g := newFnRig(t, nil, nil)
	ctx := context.Background()
	n3 := g.view.nodes["n3"]
	n3.Hardware = []string{"gpu"}
	g.view.nodes["n3"] = n3
	if err := g.eng.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		res, err := g.r.FnCall(ctx, api.FnCallRequest{Device: "gpu"})
		if err != nil || ranOn(res) != "n3" {
			t.Fatalf("gpu FnCall ran on %q (%v), want n3, the only node with a GPU", ranOn(res), err)
		}
	}
	on := map[string]int{}
	for range 40 {
		res, err := g.r.FnCall(ctx, api.FnCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		on[ranOn(res)]++
	}
	if on["n1"] == 0 || on["n3"] == 0 {
		t.Errorf("CPU FnCalls ran on %v, want both n1 and n3", on)
	}

	n3.Hardware = nil
	g.view.nodes["n3"] = n3
	if err := g.eng.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := g.nodes["n1"].count() + g.nodes["n3"].count()
	_, err := g.r.FnCall(ctx, api.FnCallRequest{Device: "gpu"})
	if !errdefs.Is(err, api.CodeNotImplemented) || !strings.Contains(err.Error(), `device "gpu"`) {
		t.Fatalf("gpu FnCall with no GPU node: %v, want not_implemented naming device \"gpu\"", err)
	}
	if after := g.nodes["n1"].count() + g.nodes["n3"].count(); after != before {
		t.Errorf("a gpu FnCall with no GPU node ran anyway (%d calls, was %d)", after, before)
	}
}
