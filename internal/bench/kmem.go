package bench

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"
)

// meminfo reads /proc/meminfo fields in bytes.
func meminfo() (map[string]int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		if len(fs) > 1 && fs[1] == "kB" {
			n <<= 10
		}
		m[k] = n
	}
	return m, sc.Err()
}

// used is memory in use by anything but reclaimable caches: the kernel's own view
// of what a workload costs (MemTotal - MemAvailable).
func used() (int64, int64, error) {
	m, err := meminfo()
	if err != nil {
		return 0, 0, err
	}
	return m["MemTotal"] - m["MemAvailable"], m["Slab"], nil
}

// SlabDelta is how much one slab cache grew per sandbox.
type SlabDelta struct {
	Cache           string  `json:"cache"`
	BytesPerSandbox int64   `json:"bytes_per_sandbox"`
	ObjsPerSandbox  float64 `json:"objs_per_sandbox"`
}

type slabCache struct{ objs, size int64 }

// readSlabinfo reads /proc/slabinfo: objects allocated and object size per cache.
func readSlabinfo() (map[string]slabCache, error) {
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]slabCache{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || strings.HasPrefix(fs[0], "#") || fs[0] == "slabinfo" {
			continue
		}
		objs, err1 := strconv.ParseInt(fs[2], 10, 64)
		size, err2 := strconv.ParseInt(fs[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		c := m[fs[0]] // merged names may repeat
		c.objs += objs
		c.size = size
		m[fs[0]] = c
	}
	return m, sc.Err()
}

// slabTop returns the k caches that grew most between a and b, per sandbox.
func slabTop(a, b map[string]slabCache, n int64, k int) []SlabDelta {
	var out []SlabDelta
	for name, cb := range b {
		ca := a[name]
		d := cb.objs*cb.size - ca.objs*ca.size
		if d <= 0 {
			continue
		}
		out = append(out, SlabDelta{Cache: name, BytesPerSandbox: d / n,
			ObjsPerSandbox: round(float64(cb.objs-ca.objs)/float64(n), 2)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BytesPerSandbox > out[j].BytesPerSandbox })
	if len(out) > k {
		out = out[:k]
	}
	return out
}

// memcgCount is the host's number of memory cgroups (/proc/cgroups), -1 if
// unknown.
func memcgCount() int {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "memory" {
			n, err := strconv.Atoi(f[2])
			if err == nil {
				return n
			}
		}
	}
	return -1
}
