package reclaim

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// KSM opt-in: a sandbox's init calls prctl(PR_SET_MEMORY_MERGE, 1) before it
// starts anything (dsec-init, config key "ksm"), so every process in it is
// mergeable; the flag survives fork and exec (Linux 6.7+). ksmd itself
// (/sys/kernel/mm/ksm/run) is the operator's: dsec does not switch it on.

// KSMAvailable reports whether the kernel has KSM.
func KSMAvailable() bool {
	_, err := os.Stat("/sys/kernel/mm/ksm/run")
	return err == nil
}

// KSMMergeAny reports whether process pid is opted into KSM as a whole
// (/proc/PID/ksm_stat "ksm_merge_any: yes").
func KSMMergeAny(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ksm_stat", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == "ksm_merge_any" {
			return strings.TrimSpace(v) == "yes", nil
		}
	}
	return false, sc.Err()
}
