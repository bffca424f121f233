package reclaim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Target is one sandbox's memory: its processes and its memory cgroup.
type Target struct {
	Pids   []int
	MemDir string // the memory cgroup directory (v1 memory hierarchy or v2 unified)
	V2     bool
}

// MemStat is the part of a memory cgroup's memory.stat reclaim reports on.
type MemStat struct {
	Usage int64 // memory.usage_in_bytes / memory.current
	Anon  int64 // anonymous memory in RAM
	File  int64 // page cache in RAM, tmpfs/shmem excluded
	Shmem int64 // tmpfs and shared anonymous memory in RAM (swap-backed)
	Swap  int64 // bytes of this group in swap, -1 when the kernel does not account it
}

// ReadMemStat reads a memory cgroup's figures.
func ReadMemStat(dir string, v2 bool) (MemStat, error) {
	kv, err := readKV(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return MemStat{}, err
	}
	st := MemStat{Swap: -1}
	if v2 {
		st.Anon, st.Shmem = kv["anon"], kv["shmem"]
		st.File = kv["file"] - st.Shmem
		st.Usage, err = readInt64(filepath.Join(dir, "memory.current"))
		if s, serr := readInt64(filepath.Join(dir, "memory.swap.current")); serr == nil {
			st.Swap = s
		}
	} else {
		st.Anon, st.Shmem = kv["rss"], kv["shmem"]
		st.File = kv["cache"] - st.Shmem
		if s, ok := kv["swap"]; ok {
			st.Swap = s
		}
		st.Usage, err = readInt64(filepath.Join(dir, "memory.usage_in_bytes"))
	}
	return st, err
}

// SwapFree reports the host's free swap in bytes (/proc/meminfo SwapFree).
func SwapFree() (int64, error) {
	kv, err := readKV("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return kv["SwapFree:"] * 1024, nil
}

// Reclaim pushes a (frozen) sandbox's memory out of RAM. With swap it pages out
// every process's anonymous memory (process_madvise MADV_PAGEOUT), then has
// the cgroup reclaim the rest (memory.reclaim on v2, with memory.swap.max
// opened; memory.force_empty on v1), page cache and tmpfs included. Without
// swap only page cache can go, and the result says so.
func Reclaim(ctx context.Context, t Target) (api.ReclaimResult, error) {
	t0 := time.Now()
	before, err := ReadMemStat(t.MemDir, t.V2)
	if err != nil {
		return api.ReclaimResult{}, fmt.Errorf("reclaim: %w", err)
	}
	free, _ := SwapFree()
	res := api.ReclaimResult{Swap: free > 0, ResidentBeforeBytes: before.Usage}
	if res.Swap {
		if t.V2 {
			if err := writeString(filepath.Join(t.MemDir, "memory.swap.max"), "max"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return res, fmt.Errorf("reclaim: open swap: %w", err)
			}
		}
		if _, err := AdviseAll(ctx, t.Pids, unix.MADV_PAGEOUT); err != nil {
			return res, fmt.Errorf("reclaim: %w", err)
		}
		res.Method = "process_madvise(MADV_PAGEOUT)+"
	} else {
		res.Note = "no swap: page cache only"
	}
	if err := ReclaimCgroup(ctx, t.MemDir, t.V2); err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	if t.V2 {
		res.Method += "memory.reclaim"
	} else {
		res.Method += "memory.force_empty"
	}
	after, err := ReadMemStat(t.MemDir, t.V2)
	if err != nil {
		return res, fmt.Errorf("reclaim: %w", err)
	}
	res.ResidentAfterBytes = after.Usage
	res.PageCacheDroppedBytes = max(0, before.File-after.File)
	if before.Swap >= 0 && after.Swap >= 0 {
		res.SwappedBytes = max(0, after.Swap-before.Swap)
	} else {
		res.SwappedBytes = max(0, before.Anon+before.Shmem-after.Anon-after.Shmem)
	}
	res.DurationMs = float64(time.Since(t0).Microseconds()) / 1000
	return res, nil
}

// Prefetch brings a sandbox's swapped anonymous memory back before it is thawed
// (process_madvise MADV_WILLNEED: swap-in read-ahead) and, on v2, closes swap
// for the group again (dsec creates groups with memory.swap.max 0). It returns
// the bytes advised.
func Prefetch(ctx context.Context, t Target) (int64, error) {
	n, err := AdviseAll(ctx, t.Pids, unix.MADV_WILLNEED)
	if err != nil {
		return n, fmt.Errorf("prefetch: %w", err)
	}
	if t.V2 {
		_ = writeString(filepath.Join(t.MemDir, "memory.swap.max"), "0")
	}
	return n, nil
}

// ReclaimCgroup has the kernel reclaim what it can of a memory cgroup:
// memory.reclaim of its whole usage on v2, memory.force_empty on v1. Both give
// up (EAGAIN, EBUSY) when what is left cannot go (anonymous memory without
// swap); that is not an error.
func ReclaimCgroup(ctx context.Context, dir string, v2 bool) error {
	if v2 {
		cur, err := readInt64(filepath.Join(dir, "memory.current"))
		if err != nil {
			return err
		}
		if cur == 0 {
			return nil
		}
		err = writeString(filepath.Join(dir, "memory.reclaim"), strconv.FormatInt(cur, 10))
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			return err
		}
		return nil
	}
	err := writeString(filepath.Join(dir, "memory.force_empty"), "0")
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINTR) {
		return err
	}
	return ctx.Err()
}

func writeString(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readInt64(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}

// readKV reads "key value" lines (memory.stat, /proc/meminfo; a trailing "kB"
// is ignored).
func readKV(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
			kv[fs[0]] = v
		}
	}
	return kv, sc.Err()
}
