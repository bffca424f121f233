package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ReclaimResult is the outcome of `dsec bench reclaim`.
type ReclaimResult struct {
	Sandboxes int    `json:"sandboxes"`
	HoldMiB   int    `json:"hold_mib"`
	Content   string `json:"content"`
	Swap      string `json:"swap"`
	SwapBytes int64  `json:"swap_bytes"`
	// Plain is pause without reclaim, Reclaim pause --reclaim, on the same
	// sandboxes in the same run.
	Plain   ReclaimPhase `json:"pause"`
	Reclaim ReclaimPhase `json:"pause_reclaim"`
	// The zram device at its fullest (after every sandbox was reclaimed):
	// uncompressed bytes stored, memory used, their ratio.
	ZramOrigBytes int64   `json:"zram_orig_bytes"`
	ZramUsedBytes int64   `json:"zram_used_bytes"`
	ZramRatio     float64 `json:"zram_compression_ratio"`
	Failures      int     `json:"failures"`
	FirstError    string  `json:"first_error,omitempty"`
}

// ReclaimPhase is one pause/resume round over every sandbox.
type ReclaimPhase struct {
	// Host memory in use (MemTotal - MemAvailable) above the baseline taken
	// before the holders started, with the sandboxes running and after all
	// were paused; HostReduction = 1 - after/before.
	HostBeforeBytes int64   `json:"host_before_bytes"`
	HostAfterBytes  int64   `json:"host_after_bytes"`
	HostReduction   float64 `json:"host_reduction"`
	// The sandboxes' memory cgroups together (less noisy than the host).
	CgroupsBeforeBytes int64   `json:"cgroups_before_bytes"`
	CgroupsAfterBytes  int64   `json:"cgroups_after_bytes"`
	PauseS             float64 `json:"pause_s"`
	// Resume is the resume call; FirstExec is resume plus the first exec
	// (`true`) answered.
	Resume      Latencies `json:"resume"`
	FirstExec   Latencies `json:"resume_first_exec"`
	ChecksumsOK int       `json:"checksums_ok"`
	Load1       float64   `json:"loadavg_1m"`
	SwappedMiB  float64   `json:"swapped_mib,omitempty"`
	Note        string    `json:"note,omitempty"`
}

const holdMiB = 64

// Reclaim creates N sandboxes each holding 64 MiB of touched anonymous memory
// (randPerPage random bytes per 4 KiB page, the rest zero: how compressible it
// is) on a node with its own zram swap (zramBytes; 0: 1.25 x what they hold plus
// 256 MiB), then pauses and resumes them all twice: plainly, and with reclaim.
func Reclaim(ctx context.Context, o Options, zramBytes int64, randPerPage int) (ReclaimResult, error) {
	if randPerPage <= 0 || randPerPage > 4096 {
		randPerPage = 512
	}
	o.defaults()
	if zramBytes == 0 {
		zramBytes = int64(o.N)*holdMiB<<20*5/4 + 256<<20
	}
	d, cleanup, err := openNode(ctx, o, func(c *daemon.Config) { c.QoS.ZramBytes = zramBytes })
	if err != nil {
		return ReclaimResult{}, err
	}
	defer cleanup()
	m := d.Manager
	res := ReclaimResult{Sandboxes: o.N, HoldMiB: holdMiB, SwapBytes: zramBytes,
		Content: fmt.Sprintf("each 4 KiB page: %d random bytes, the rest zero", randPerPage)}
	if info, err := m.Info(ctx); err == nil && info.QoS != nil {
		res.Swap = info.QoS.Swap
	}
	ids := make([]string, o.N)
	_, _, failures, first := runLoad(ctx, o.N, o.Parallel, true, func(_, i int) error {
		sb, err := m.Create(ctx, api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 256 << 20})
		ids[i] = sb.ID
		return err
	})
	if failures > 0 {
		return res, fmt.Errorf("create: %w", first)
	}
	time.Sleep(300 * time.Millisecond)
	base, _, err := used()
	if err != nil {
		return res, err
	}
	sums := make([]string, o.N)
	_, _, failures, first = runLoad(ctx, o.N, o.Parallel, true, func(_, i int) error {
		if _, err := m.StartProcess(ctx, ids[i], api.ExecRequest{Cmd: []string{"python3", "-c", MemHoldScript(holdMiB, randPerPage)}}); err != nil {
			return err
		}
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			r, err := m.Exec(ctx, ids[i], api.ExecRequest{Cmd: []string{"cat", "/tmp/sum1"}})
			if err == nil && r.ExitCode == 0 && len(r.Stdout) == 64 {
				sums[i] = r.Stdout
				return nil
			}
		}
		return fmt.Errorf("sandbox %s: holder did not come up", ids[i])
	})
	if failures > 0 {
		return res, fmt.Errorf("start holders: %w", first)
	}
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		res.Failures++
		if res.FirstError == "" {
			res.FirstError = err.Error()
		}
	}
	phase := func(reclaim bool) (ReclaimPhase, error) {
		var ph ReclaimPhase
		l0 := loadavg()
		time.Sleep(200 * time.Millisecond)
		u, _, err := used()
		if err != nil {
			return ph, err
		}
		ph.HostBeforeBytes = u - base
		ph.CgroupsBeforeBytes, _ = d.Driver.CgroupMemoryUsage()
		t0 := time.Now()
		var swapped int64
		for _, id := range ids {
			if reclaim {
				r, err := m.PauseWith(ctx, id, api.PauseRequest{Reclaim: true})
				if err != nil {
					return ph, fmt.Errorf("pause --reclaim %s: %w", id, err)
				}
				swapped += r.Reclaim.SwappedBytes
				ph.Note = r.Reclaim.Note
			} else if _, err := m.Pause(ctx, id); err != nil {
				return ph, fmt.Errorf("pause %s: %w", id, err)
			}
		}
		ph.PauseS = round3(time.Since(t0).Seconds())
		ph.SwappedMiB = round(float64(swapped)/(1<<20), 1)
		time.Sleep(200 * time.Millisecond)
		if u, _, err = used(); err != nil {
			return ph, err
		}
		ph.HostAfterBytes = u - base
		ph.CgroupsAfterBytes, _ = d.Driver.CgroupMemoryUsage()
		if ph.HostBeforeBytes > 0 {
			ph.HostReduction = round(1-float64(ph.HostAfterBytes)/float64(ph.HostBeforeBytes), 3)
		}
		if reclaim {
			res.ZramOrigBytes, res.ZramUsedBytes = zramStats(res.Swap)
			if res.ZramUsedBytes > 0 {
				res.ZramRatio = round(float64(res.ZramOrigBytes)/float64(res.ZramUsedBytes), 2)
			}
		}
		var resume, firstExec []time.Duration
		for i, id := range ids {
			t := time.Now()
			if _, err := m.Resume(ctx, id); err != nil {
				return ph, fmt.Errorf("resume %s: %w", id, err)
			}
			resume = append(resume, time.Since(t))
			r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
			if err != nil || r.ExitCode != 0 {
				fail(fmt.Errorf("first exec in %s: %v (exit %d)", id, err, r.ExitCode))
				continue
			}
			firstExec = append(firstExec, time.Since(t))
			if err := verifySum(ctx, m, id, sums[i]); err != nil {
				fail(err)
			} else {
				ph.ChecksumsOK++
			}
		}
		ph.Resume, ph.FirstExec = summarize(resume), summarize(firstExec)
		ph.Load1 = round((l0+loadavg())/2, 2)
		return ph, nil
	}
	if res.Plain, err = phase(false); err != nil {
		return res, err
	}
	if res.Reclaim, err = phase(true); err != nil {
		return res, err
	}
	return res, nil
}

// verifySum has the holder checksum its memory again and compares.
func verifySum(ctx context.Context, m *agent.Manager, id, want string) error {
	if _, err := m.Exec(ctx, id, api.ExecRequest{Shell: "rm -f /tmp/sum2; kill -USR1 $(cat /tmp/holder.pid)"}); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"cat", "/tmp/sum2"}})
		if err == nil && r.ExitCode == 0 && len(r.Stdout) == 64 {
			if r.Stdout != want {
				return fmt.Errorf("sandbox %s: memory checksum changed across pause/resume", id)
			}
			return nil
		}
	}
	return fmt.Errorf("sandbox %s: no checksum after resume", id)
}

// zramStats reads the stats of the zram device whose node is dev (".../zramN").
func zramStats(dev string) (orig, used int64) {
	n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dev), "zram"))
	if err != nil {
		return 0, 0
	}
	orig, used, _ = (&reclaim.Zram{N: n}).Stats()
	return orig, used
}

func round3(f float64) float64 { return round(f, 3) }
