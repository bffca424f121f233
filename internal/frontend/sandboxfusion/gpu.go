package sandboxfusion

import (
	"fmt"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/pkg/api"
)

// gpuLanguages are SandboxFusion's GPU languages (runners/cuda.py): FnCalls of
// device "gpu", which run only on a node that advertises a GPU. As there, the
// project is the request's files and `code` is not the program (it is kept
// in gpuCodeFile): cuda builds it with CMake and runs build/main, python_gpu
// runs compile.py, then run.py. The build's output goes to stderr, the run's
// stdin and stdout are the call's. On a node without a GPU (every node of a
// cluster without one) the call is answered with SandboxFusion's error shape
// for a runner that cannot run: status SandboxError naming the language
// (noGPU).
var gpuLanguages = map[string]language{
	"cuda": {main: gpuCodeFile, device: hostfeat.GPU, cmd: []string{"/bin/sh", "-c",
		"(mkdir build && cd build && cmake .. && make -j 4) >&2 && exec ./build/main"}},
	"python_gpu": {main: gpuCodeFile, device: hostfeat.GPU, cmd: []string{"/bin/sh", "-c",
		"python3 compile.py >&2 && exec python3 run.py"}},
}

// gpuCodeFile holds a GPU language's `code` in the work directory.
const gpuCodeFile = ".sandboxfusion-code"

// noGPU is the answer to a GPU language's call that no node can take: err
// (from the FnCall) is not_implemented for a request of a device. A 200 with
// status SandboxError is how SandboxFusion reports a runner that cannot run;
// verl scores it -1 at once and keeps the message, where a 504 would be
// retried in vain and a 503 is one the queue waits on.
func noGPU(language string, fr api.FnCallRequest, err error) (RunCodeResponse, bool) {
	if fr.Device == "" || !errdefs.Is(err, api.CodeNotImplemented) {
		return RunCodeResponse{}, false
	}
	msg := fmt.Sprintf("language %s is unavailable: it needs a GPU and no node here has one (%v)", language, err)
	return RunCodeResponse{Status: StatusSandboxError, Message: msg, Files: map[string]string{}}, true
}
