package reclaim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// DefaultDAMONRoot is the kernel's DAMON sysfs interface.
const DefaultDAMONRoot = "/sys/kernel/mm/damon/admin"

// DAMONFS is how the DAMON driver reads and writes the sysfs tree; tests use a
// fake that imitates the kernel (directories appearing on nr_* writes).
type DAMONFS interface {
	Read(path string) (string, error)
	Write(path, value string) error
}

// OSFS is the real file system under Root.
type OSFS struct{}

// Read implements DAMONFS.
func (OSFS) Read(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// Write implements DAMONFS.
func (OSFS) Write(p, v string) error { return writeString(p, v) }

// DAMONScheme is the pageout scheme dsec installs: regions of at least MinAge
// aggregation intervals without access are paged out, at most QuotaBytes per
// QuotaResetMs (the throttle).
type DAMONScheme struct {
	SampleUs, AggrUs, UpdateUs int64
	MinAgeAggr                 int64
	QuotaBytes                 int64
	QuotaResetMs               int64
}

// DefaultDAMONScheme samples every 5 ms, aggregates every 100 ms, pages out
// regions untouched for 10 s (100 aggregations), at most 64 MiB per second.
func DefaultDAMONScheme() DAMONScheme {
	return DAMONScheme{SampleUs: 5000, AggrUs: 100000, UpdateUs: 1000000, MinAgeAggr: 100, QuotaBytes: 64 << 20, QuotaResetMs: 1000}
}

// DAMON drives one kdamond that dsec created, through a DAMON sysfs root.
// OpenDAMON refuses a host where kdamonds exist that dsec did not create
// (another owner's, e.g. the platform's): writing nr_kdamonds would destroy
// them. Ownership is recorded in a state file (kdamond index and pid), so a
// restarted dsec recognises its own.
type DAMON struct {
	root   string
	fs     DAMONFS
	state  string // ownership record
	scheme DAMONScheme

	mu      sync.Mutex
	idx     int
	running []int // target pids while on
}

type damonOwnership struct {
	Root  string `json:"root"`
	Index int    `json:"index"`
}

// ErrDAMONNotOurs is returned when the host has kdamonds dsec did not create.
var ErrDAMONNotOurs = errors.New("damon: the host has kdamonds dsec did not create; leaving DAMON alone")

// OpenDAMON detects DAMON under root and takes ownership of a kdamond: it
// creates one (nr_kdamonds 0 → 1) only when there are none, or re-takes the
// one stateFile says dsec created. Anything else is ErrDAMONNotOurs.
func OpenDAMON(root string, fs DAMONFS, stateFile string, scheme DAMONScheme) (*DAMON, error) {
	if fs == nil {
		fs = OSFS{}
	}
	d := &DAMON{root: root, fs: fs, state: stateFile, scheme: scheme}
	nrS, err := fs.Read(d.p("kdamonds", "nr_kdamonds"))
	if err != nil {
		return nil, fmt.Errorf("damon: not available at %s: %w", root, err)
	}
	nr, err := strconv.Atoi(nrS)
	if err != nil {
		return nil, fmt.Errorf("damon: nr_kdamonds %q: %w", nrS, err)
	}
	var own damonOwnership
	if b, err := os.ReadFile(stateFile); err == nil && json.Unmarshal(b, &own) == nil && own.Root == root {
		if nr != own.Index+1 {
			return nil, fmt.Errorf("%w (recorded kdamond %d, host has %d)", ErrDAMONNotOurs, own.Index, nr)
		}
		d.idx = own.Index
		if err := d.Stop(); err != nil {
			return nil, err
		}
		return d, nil
	}
	if nr != 0 {
		return nil, fmt.Errorf("%w (%d kdamonds)", ErrDAMONNotOurs, nr)
	}
	if err := fs.Write(d.p("kdamonds", "nr_kdamonds"), "1"); err != nil {
		return nil, fmt.Errorf("damon: create kdamond: %w", err)
	}
	d.idx = 0
	b, _ := json.Marshal(damonOwnership{Root: root, Index: 0})
	if err := os.WriteFile(stateFile, b, 0o600); err != nil {
		_ = fs.Write(d.p("kdamonds", "nr_kdamonds"), "0")
		return nil, fmt.Errorf("damon: record ownership: %w", err)
	}
	return d, nil
}

func (d *DAMON) p(parts ...string) string {
	return filepath.Join(append([]string{d.root}, parts...)...)
}

func (d *DAMON) kd(parts ...string) string {
	return d.p(append([]string{"kdamonds", strconv.Itoa(d.idx)}, parts...)...)
}

// Apply makes the kdamond monitor exactly pids (virtual address spaces) with the
// pageout scheme, restarting it when the set changed; no pids stops it.
func (d *DAMON) Apply(pids []int) error {
	pids = slices.Clone(pids)
	slices.Sort(pids)
	pids = slices.Compact(pids)
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Equal(pids, d.running) {
		return nil
	}
	if err := d.stopLocked(); err != nil {
		return err
	}
	if len(pids) == 0 {
		return nil
	}
	s := d.scheme
	ctx := func(parts ...string) string { return d.kd(append([]string{"contexts", "0"}, parts...)...) }
	writes := [][2]string{
		{d.kd("contexts", "nr_contexts"), "1"},
		{ctx("operations"), "vaddr"},
		{ctx("monitoring_attrs", "intervals", "sample_us"), strconv.FormatInt(s.SampleUs, 10)},
		{ctx("monitoring_attrs", "intervals", "aggr_us"), strconv.FormatInt(s.AggrUs, 10)},
		{ctx("monitoring_attrs", "intervals", "update_us"), strconv.FormatInt(s.UpdateUs, 10)},
		{ctx("targets", "nr_targets"), strconv.Itoa(len(pids))},
	}
	for i, pid := range pids {
		writes = append(writes, [2]string{ctx("targets", strconv.Itoa(i), "pid_target"), strconv.Itoa(pid)})
	}
	sc := func(parts ...string) string { return ctx(append([]string{"schemes", "0"}, parts...)...) }
	writes = append(writes,
		[2]string{ctx("schemes", "nr_schemes"), "1"},
		[2]string{sc("action"), "pageout"},
		[2]string{sc("access_pattern", "nr_accesses", "min"), "0"},
		[2]string{sc("access_pattern", "nr_accesses", "max"), "0"},
		[2]string{sc("access_pattern", "age", "min"), strconv.FormatInt(s.MinAgeAggr, 10)},
		[2]string{sc("quotas", "bytes"), strconv.FormatInt(s.QuotaBytes, 10)},
		[2]string{sc("quotas", "reset_interval_ms"), strconv.FormatInt(s.QuotaResetMs, 10)},
		[2]string{d.kd("state"), "on"},
	)
	for _, w := range writes {
		if err := d.fs.Write(w[0], w[1]); err != nil {
			return fmt.Errorf("damon: write %s: %w", w[0], err)
		}
	}
	d.running = pids
	return nil
}

// Running reports the pids the kdamond monitors (nil when off).
func (d *DAMON) Running() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.running)
}

// Stop turns dsec's kdamond off.
func (d *DAMON) Stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopLocked()
}

func (d *DAMON) stopLocked() error {
	st, err := d.fs.Read(d.kd("state"))
	if err != nil {
		return fmt.Errorf("damon: %w", err)
	}
	if st == "on" {
		if err := d.fs.Write(d.kd("state"), "off"); err != nil {
			return fmt.Errorf("damon: stop: %w", err)
		}
	}
	d.running = nil
	return nil
}

// Close stops the kdamond and removes it (nr_kdamonds back to 0) and the
// ownership record.
func (d *DAMON) Close() error {
	if err := d.Stop(); err != nil {
		return err
	}
	if err := d.fs.Write(d.p("kdamonds", "nr_kdamonds"), "0"); err != nil {
		return fmt.Errorf("damon: remove kdamond: %w", err)
	}
	return os.Remove(d.state)
}
