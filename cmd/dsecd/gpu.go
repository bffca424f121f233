package main

import (
	"github.com/spf13/pflag"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
)

// gpuFlags are the node's GPU flags, the same on `dsec server` and `dsec agent`.
func gpuFlags(f *pflag.FlagSet, cfg *daemon.Config) {
	f.StringVar(&cfg.GPU, "gpu", daemon.GPUAuto, "advertise a GPU and take SandboxFusion's cuda and python_gpu calls: auto (when --gpu-dev-dir has NVIDIA device nodes nvidia0, ...), on or off")
	f.StringVar(&cfg.GPUDevDir, "gpu-dev-dir", daemon.DefaultGPUDevDir, "where --gpu auto looks for NVIDIA device nodes")
}
