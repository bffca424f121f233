package api

import "time"

// CPU classes (CreateSandboxRequest.CPUClass, SetCPUClassRequest).
const (
	CPUClassLS = "ls" // latency-sensitive: competes normally, core scheduling where the kernel has it
	CPUClassBE = "be" // best-effort: an idle cgroup (cpu.idle=1), threads SCHED_IDLE
)

// PauseRequest is the (optional) body of POST /v1/sandboxes/{id}/pause.
type PauseRequest struct {
	// Reclaim pushes the frozen sandbox's memory out of RAM (into swap; without
	// swap only its page cache is dropped). Resume prefetches it back.
	Reclaim bool `json:"reclaim,omitempty"`
	// Memory false pauses without memory (a filesystem-only pause): the
	// sandbox's processes are killed and all its memory freed, its files
	// kept; resume boots it afresh on them under the same ID (a new boot).
	// Backends that cannot answer not_implemented. Absent or true: the
	// processes are frozen with their memory, as without a body.
	Memory *bool `json:"memory,omitempty"`
}

// PauseResponse answers a pause: the sandbox, and with reclaim what moved.
type PauseResponse struct {
	Sandbox
	Reclaim *ReclaimResult `json:"reclaim,omitempty"`
}

// ReclaimResult says what a reclaim moved out of RAM.
type ReclaimResult struct {
	// Swap is whether the host had swap to push anonymous memory into.
	Swap bool `json:"swap"`
	// SwappedBytes is anonymous (and tmpfs) memory moved to swap.
	SwappedBytes int64 `json:"swapped_bytes"`
	// PageCacheDroppedBytes is page cache released.
	PageCacheDroppedBytes int64 `json:"page_cache_dropped_bytes"`
	// ResidentBeforeBytes and ResidentAfterBytes are the sandbox's memory
	// cgroup usage around the reclaim.
	ResidentBeforeBytes int64 `json:"resident_before_bytes"`
	ResidentAfterBytes  int64 `json:"resident_after_bytes"`
	// Method names the kernel interfaces used.
	Method string `json:"method"`
	// Note explains a partial reclaim ("no swap: page cache only").
	Note       string  `json:"note,omitempty"`
	DurationMs float64 `json:"duration_ms"`
}

// SetCPUClassRequest is the body of PUT /v1/sandboxes/{id}/cpu-class.
type SetCPUClassRequest struct {
	CPUClass string `json:"cpu_class"`
}

// QoSInfo reports the node's CPU-class and memory-reclaim facilities (Info.QoS).
type QoSInfo struct {
	// DefaultCPUClass applies to creates that name none.
	DefaultCPUClass string `json:"default_cpu_class"`
	// CoreScheduling: LS sandboxes get a PR_SCHED_CORE cookie (needs CONFIG_SCHED_CORE).
	CoreScheduling bool `json:"core_scheduling"`
	// Swap is the swap device dsec owns ("" when none), SwapBytes its size.
	Swap      string `json:"swap,omitempty"`
	SwapBytes int64  `json:"swap_bytes,omitempty"`
	// IdleReclaimAfterSeconds pages out idle sandboxes' cold memory (0: off).
	IdleReclaimAfterSeconds float64 `json:"idle_reclaim_after_seconds,omitempty"`
	// DAMON: idle reclaim selects cold regions with a kdamond dsec owns;
	// DAMONNote says why not when false.
	DAMON     bool   `json:"damon"`
	DAMONNote string `json:"damon_note,omitempty"`
}

// SandboxUsage is one sandbox's resource use as its node last read it (the
// dashboard's per-sandbox CPU and memory, dsec top, the node's metrics).
type SandboxUsage struct {
	ID      string `json:"id"`
	Backend string `json:"backend"`
	State   string `json:"state"` // StateRunning, StatePaused or StateExited
	// MemoryBytes is the memory charged (-1: unknown: the backend does not say,
	// or it was not read); MemoryLimitBytes the sandbox's limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// CPUSeconds is the CPU time its processes used so far (-1: unknown);
	// CPULimit its limit in cores.
	CPUSeconds float64 `json:"cpu_seconds"`
	CPULimit   float64 `json:"cpu_limit"`
}

// UsageSamplePeriod is the shortest time between two samples of a sandbox's
// usage history: a request that finds a sample younger than this takes none.
const UsageSamplePeriod = 5 * time.Second

// UsageSample is one reading of a sandbox's use, kept by its node in the
// sandbox's usage history (E2B's metrics series).
type UsageSample struct {
	At time.Time `json:"at"`
	// CPUPercent is the CPU used since the previous sample (since creation for
	// the first) in percent of CPULimit cores (of one core without a limit),
	// 0..100; CPULimit the limit in cores (0: none).
	CPUPercent float64 `json:"cpu_percent"`
	CPULimit   float64 `json:"cpu_limit"`
	// MemoryBytes is the memory charged (0 when the backend does not say);
	// MemoryLimitBytes the limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// DiskUsedBytes and DiskTotalBytes are the root file system as df sees it
	// inside the sandbox (0 while it cannot run a command, e.g. paused).
	DiskUsedBytes  int64 `json:"disk_used_bytes"`
	DiskTotalBytes int64 `json:"disk_total_bytes"`
}

// UsageHistoryRequest selects samples of a sandbox's usage history: those
// taken from Start to UsageSamplePeriod after End (nil: unbounded). A window
// that reaches the present takes a sample first, unless the newest is
// younger than UsageSamplePeriod.
type UsageHistoryRequest struct {
	Start *time.Time `json:"start,omitempty"`
	End   *time.Time `json:"end,omitempty"`
}
