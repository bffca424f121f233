// Package reclaim pushes a sandbox's memory out of RAM and brings it back: the
// mechanics behind pause-with-reclaim (DSec §6.3), idle reclaim and KSM opt-in.
//
//   - PageOut / Prefetch: process_madvise(MADV_PAGEOUT | MADV_COLD | MADV_WILLNEED)
//     over the private anonymous mappings of a sandbox's processes (any kernel
//     with process_madvise, cgroup v1 or v2).
//   - Cgroup: memory.reclaim (v2) or memory.force_empty (v1) for what is left,
//     page cache included, and the memory.stat figures that say what moved.
//   - Zram: a compressed swap device dsec creates (hot_add), owns and removes
//     (swapoff, reset, hot_remove); swap dsec did not create is never touched.
//   - DAMON: a kdamond dsec creates through a configurable sysfs root, with a
//     pageout scheme for cold regions; it refuses hosts whose kdamonds are not
//     dsec's.
//   - KSM: PR_SET_MEMORY_MERGE for a process (inherited across fork and exec).
package reclaim
