package api

// VMAccel is how a VM backend runs guests: "kvm" or "tcg", and why (the KVM
// boot probe's outcome).
type VMAccel struct {
	Accel  string `json:"accel"`
	Reason string `json:"reason"`
}

// VMInfo is Info.VM: the microvm backend's acceleration and setup.
type VMInfo struct {
	Accel             string `json:"accel"`
	Reason            string `json:"reason"`
	Kernel            string `json:"kernel"`
	FreePageReporting bool   `json:"free_page_reporting"`
}
