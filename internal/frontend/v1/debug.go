package v1

import (
	"net/http"
	"os"
	"runtime"
)

// RuntimeStats is the answer of GET /v1/debug/runtime: what a soak test or an
// operator watches for leaks in the server process itself.
type RuntimeStats struct {
	Goroutines     int    `json:"goroutines"`
	OpenFDs        int    `json:"open_fds"` // -1 when /proc/self/fd cannot be read
	HeapAllocBytes uint64 `json:"heap_alloc_bytes"`
	SysBytes       uint64 `json:"sys_bytes"` // memory obtained from the OS by the Go runtime
}

// debugRuntime handles GET /v1/debug/runtime (authenticated like every route
// but health).
func (s *Server) debugRuntime(w http.ResponseWriter, r *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := RuntimeStats{Goroutines: runtime.NumGoroutine(), OpenFDs: -1, HeapAllocBytes: ms.HeapAlloc, SysBytes: ms.Sys}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		st.OpenFDs = len(ents) - 1 // the directory's own descriptor
	}
	writeJSON(w, http.StatusOK, st)
}
