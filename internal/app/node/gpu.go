package node

import (
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A node advertises a GPU (hardware "gpu" in its cluster record) when it has
// NVIDIA device nodes (/dev/nvidia0, ...) or is told so (--gpu on), and then
// takes FnCalls of device "gpu" (SandboxFusion's cuda and python_gpu); a node
// without one refuses them as not_implemented, so an API server places them
// on a node that has one. The FnCall sandbox does not get the device nodes
// yet: on a GPU node such a call runs its command as any FnCall does
// (untested on a real GPU: the machines dsec is tested on have none).

// GPU modes (Config.GPU).
const (
	GPUAuto = "auto" // advertise a GPU when GPUDevDir has NVIDIA device nodes (default)
	GPUOn   = "on"
	GPUOff  = "off"
)

// DefaultGPUDevDir is where GPUAuto looks.
const DefaultGPUDevDir = "/dev"

// hasGPU resolves the GPU mode.
func hasGPU(mode, devDir string) (bool, error) {
	switch mode {
	case GPUOn:
		return true, nil
	case GPUOff:
		return false, nil
	case "", GPUAuto:
		if devDir == "" {
			devDir = DefaultGPUDevDir
		}
		devs, err := hostfeat.GPUDevices(devDir)
		return len(devs) > 0, err
	}
	return false, errdefs.Invalid("gpu mode %q: want %s, %s or %s", mode, GPUAuto, GPUOn, GPUOff)
}

// Hardware is what the node offers beyond CPU and memory, for its cluster
// record: "gpu" when it advertises a GPU.
func (d *Daemon) Hardware() []string {
	if d.node.gpu {
		return []string{hostfeat.GPU}
	}
	return nil
}

// gpuDevice admits req's device: "gpu" only on a node with a GPU, where the
// call then runs as a FnCall of the engine's (which knows no devices).
func (n node) gpuDevice(req *api.FnCallRequest) error {
	if req.Device != hostfeat.GPU {
		return nil
	}
	if !n.gpu {
		return errdefs.New(api.CodeNotImplemented, "node %s has no GPU for device %q (no NVIDIA device node; --gpu)", n.Manager.Node(), req.Device)
	}
	req.Device = ""
	return nil
}
