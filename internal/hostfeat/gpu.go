package hostfeat

import (
	"fmt"
	"os"
	"regexp"
	"sort"
)

// GPU is the hardware a node with a GPU advertises to the cluster
// (NodeRecord.Hardware) and FnCalls of device "gpu" are placed by.
const GPU = "gpu"

// nvidiaDevice matches the per-GPU device nodes of NVIDIA's driver (nvidia0,
// nvidia1, ...), not its control nodes (nvidiactl, nvidia-uvm).
var nvidiaDevice = regexp.MustCompile(`^nvidia[0-9]+$`)

// GPUDevices lists the NVIDIA GPU device nodes in devDir ("/dev" on a real
// host; tests point it at a directory of their own), sorted. A devDir that
// does not exist has none.
func GPUDevices(devDir string) ([]string, error) {
	ents, err := os.ReadDir(devDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: list %s: %w", devDir, err)
	}
	var out []string
	for _, e := range ents {
		if nvidiaDevice.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
