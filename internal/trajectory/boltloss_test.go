package trajectory

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Power loss and process crashes of the bbolt store. bbolt writes through
// *os.File and reads through mmap, with no file system layer to put a crashable
// one under (powerloss_test.go does that for Pebble), so its power loss is
// modelled at the file level from what bbolt documents of a commit: it grows
// the file (ftruncate, fsync), writes the transaction's pages at their
// offsets, fdatasyncs, writes the meta page (page 0 or 1), fdatasyncs; a
// commit with NoSync set skips both fdatasyncs. The committer reports each
// commit and whether it was fsync'd (boltOptions.afterCommit) before its
// callers are answered; the test then reads the file (what the page cache
// holds) and keeps the bytes a disk holds for sure: the file as of the last
// fsync. A power loss at each point of the commit leaves those bytes plus any
// of the 512-byte sectors written since, each kept or lost on its own (torn
// pages, in any order); the test opens such disk images and checks them
// against the answers given before that point (checkAnswers: every answered
// step there exactly, re-issuing it replays it, nothing half-written returned
// as a step, the next step runs live).
//
// TestBoltProcessCrash runs a writer in a child process (this test binary
// again) and kills it with SIGKILL at random points: the page cache keeps
// every write, so a crash there may only cut a commit short.

const (
	blSector = 512
	blSteps  = 12
)

// boltLoss is one power-loss run over the bbolt store.
type boltLoss struct {
	path string // the live log
	dir  string // where disk images are opened
	// torn also opens images with a random half of the unsynced sectors
	// written back; without it, only exactly what was fsynced.
	torn     bool
	stopAt   bool // stop checking at the first failed check
	rng      *rand.Rand
	pageSize int

	disk  []byte // what the disk holds for sure: the file as of the last fsync
	cache []byte // the file before the commit being reported
	seen  map[string]bool

	mu       sync.Mutex
	acked    map[string]int // trajectory: highest step answered
	points   int
	commits  int
	synced   int
	problems []string
}

// commit models the power losses of the commit just made (see above).
func (bl *boltLoss) commit(synced bool) {
	cur, err := os.ReadFile(bl.path)
	if err != nil {
		bl.fail(fmt.Sprintf("read the live log: %v", err))
		return
	}
	bl.mu.Lock()
	acked := make(map[string]int, len(bl.acked))
	for k, v := range bl.acked {
		acked[k] = v
	}
	bl.commits++
	if synced {
		bl.synced++
	}
	bl.mu.Unlock()
	if len(cur) > len(bl.cache) {
		// bbolt grew the file: ftruncate and fsync before any page is written.
		bl.disk = pad(bl.cache, len(cur))
	}
	if synced {
		// The pages, then a fdatasync, then the meta page, then a fdatasync.
		pages := bl.withMeta(cur, bl.cache)
		bl.crashes(pages, acked)
		bl.disk = pages
		bl.crashes(cur, acked)
		bl.disk = slices.Clone(cur)
	} else {
		bl.crashes(cur, acked)
	}
	bl.cache = cur
}

// withMeta is cur with the meta pages (0 and 1) of old: the file after a
// commit's pages were written and before its meta page was.
func (bl *boltLoss) withMeta(cur, old []byte) []byte {
	out := slices.Clone(cur)
	copy(out[:2*bl.pageSize], old[:2*bl.pageSize])
	return out
}

func pad(b []byte, n int) []byte {
	out := make([]byte, max(n, len(b)))
	copy(out, b)
	return out
}

// crashes checks the disk images a power loss leaves while the page cache
// holds cache: the fsync'd bytes alone and, when torn, with a random half of
// the sectors written since.
func (bl *boltLoss) crashes(cache []byte, acked map[string]int) {
	bl.check(pad(bl.disk, len(cache)), acked, "fsync'd bytes only")
	if !bl.torn {
		return
	}
	img := pad(bl.disk, len(cache))
	kept := 0
	for off := 0; off < len(cache); off += blSector {
		end := min(off+blSector, len(cache))
		if !bytes.Equal(img[off:end], cache[off:end]) && bl.rng.IntN(2) == 0 {
			copy(img[off:end], cache[off:end])
			kept++
		}
	}
	if kept > 0 {
		bl.check(img, acked, fmt.Sprintf("%d unsynced sectors written back", kept))
	}
}

// check opens a disk image as the log and checks it against acked.
func (bl *boltLoss) check(img []byte, acked map[string]int, what string) {
	if bl.stopAt && len(bl.problems) > 0 {
		return
	}
	key := string(img) + fmt.Sprint(acked)
	if bl.seen[key] {
		return
	}
	bl.seen[key] = true
	bl.points++
	path := filepath.Join(bl.dir, "crashed.db")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		bl.fail(err.Error())
		return
	}
	if err := checkBoltFile(path, acked); err != nil {
		bl.fail(fmt.Sprintf("crash point %d (commit %d, %s): %v", bl.points, bl.commits, what, err))
	}
}

func (bl *boltLoss) fail(p string) {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	bl.problems = append(bl.problems, p)
}

// checkBoltFile opens the log at path and checks the trajectories of acked.
func checkBoltFile(path string, acked map[string]int) error {
	b, err := OpenBolt(path)
	if err != nil {
		return fmt.Errorf("the log does not open: %w", err)
	}
	defer b.Close()
	trajs := make([]string, 0, len(acked))
	for t := range acked {
		trajs = append(trajs, t)
	}
	slices.Sort(trajs)
	if err := checkAnswers(context.Background(), b, trajs, acked); err != nil {
		return err
	}
	return b.Close()
}

// run runs plParallel trajectories of blSteps steps in lockstep, one call at a
// time: every trajectory's step starts (consecutive commits of started marks),
// then every one is answered.
func (bl *boltLoss) run(t *testing.T, noSync bool) {
	ctx := context.Background()
	bl.dir = t.TempDir()
	bl.path = filepath.Join(bl.dir, BoltFile)
	bl.rng = rand.New(rand.NewPCG(3, 4))
	bl.pageSize = os.Getpagesize()
	bl.acked = map[string]int{}
	bl.seen = map[string]bool{}
	// The log file exists, fsync'd, before the workload starts.
	b, err := openBolt(bl.path, boltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if bl.disk, err = os.ReadFile(bl.path); err != nil {
		t.Fatal(err)
	}
	bl.cache = slices.Clone(bl.disk)
	b, err = openBolt(bl.path, boltOptions{afterCommit: bl.commit, noSync: noSync})
	if err != nil {
		t.Fatal(err)
	}
	trajs := make([]string, plParallel)
	for i := range trajs {
		trajs[i] = plTraj(i)
		bl.acked[trajs[i]] = 0
	}
	for n := 1; n <= blSteps && !(bl.stopAt && len(bl.problems) > 0); n++ {
		for _, tr := range trajs {
			if err := plStart(ctx, b, tr, n); err != nil {
				t.Fatal(err)
			}
		}
		for _, tr := range trajs {
			if err := plEnd(ctx, b, tr, n); err != nil {
				t.Fatal(err)
			}
			bl.mu.Lock()
			bl.acked[tr] = n
			bl.mu.Unlock()
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	cur, err := os.ReadFile(bl.path)
	if err != nil {
		t.Fatal(err)
	}
	bl.crashes(cur, bl.acked) // a power loss after the last answer
}

func (bl *boltLoss) report(t *testing.T) {
	for i, p := range bl.problems {
		if i == plMaxReport {
			t.Errorf("... and %d more", len(bl.problems)-i)
			break
		}
		t.Error(p)
	}
}

// TestBoltPowerLoss: at every crash point of every commit, with exactly the
// fsync'd bytes on disk or with any of the unsynced sectors too, the log opens,
// every answered step is there exactly and nothing answered runs again.
func TestBoltPowerLoss(t *testing.T) {
	bl := &boltLoss{torn: true}
	start := time.Now()
	bl.run(t, false)
	t.Logf("%d commits (%d fsync'd), %d distinct crash images checked in %v", bl.commits, bl.synced, bl.points,
		time.Since(start).Round(time.Millisecond))
	if bl.commits < plParallel*blSteps || bl.points < 2*bl.commits {
		t.Errorf("%d commits, %d crash images: the workload is too small to prove anything", bl.commits, bl.points)
	}
	bl.report(t)
}

// TestBoltPowerLossWeakened: the same test against a store whose commits skip
// the fsync (bbolt's NoSync) must find answered steps lost.
func TestBoltPowerLossWeakened(t *testing.T) {
	bl := &boltLoss{stopAt: true}
	bl.run(t, true)
	lost := slices.IndexFunc(bl.problems, func(p string) bool { return strings.Contains(p, "answered") })
	if lost < 0 {
		t.Fatalf("%d crash images of a store that never fsyncs, and no answered step was lost: %q", bl.points, bl.problems)
	}
	t.Logf("without fsync: %s", bl.problems[lost])
}

// Process crashes: the child (this test binary with blChildEnv set) opens the
// log named by the variable and runs plParallel trajectories (named by the
// prefix in blPrefixEnv) at once, printing "TRAJ N" once step N is answered.
const (
	blChildEnv  = "DSEC_TEST_BOLT_CRASH_LOG"
	blPrefixEnv = "DSEC_TEST_BOLT_CRASH_PREFIX"
	blRounds    = 8
)

func boltCrashChild(path, prefix string) {
	ctx := context.Background()
	b, err := OpenBolt(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range plParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := prefix + plTraj(i)
			for n := 1; n <= plSteps; n++ {
				err := plStart(ctx, b, tr, n)
				if err == nil {
					err = plEnd(ctx, b, tr, n)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Printf("%s %d\n", tr, n)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.Close()
	os.Exit(0)
}

// TestBoltProcessCrash: a writer killed with SIGKILL at random points, blRounds
// times over one log, leaves a log that opens with every answer of every round
// there exactly, and nothing answered runs again.
func TestBoltProcessCrash(t *testing.T) {
	if path := os.Getenv(blChildEnv); path != "" {
		boltCrashChild(path, os.Getenv(blPrefixEnv))
	}
	path := filepath.Join(t.TempDir(), BoltFile)
	rng := rand.New(rand.NewPCG(5, 6))
	acked := map[string]int{}
	killed := 0
	for round := range blRounds {
		prefix := fmt.Sprintf("r%d-", round)
		cmd := exec.Command(os.Args[0], "-test.run=^TestBoltProcessCrash$")
		cmd.Env = append(os.Environ(), blChildEnv+"="+path, blPrefixEnv+"="+prefix)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := range plParallel {
			acked[prefix+plTraj(i)] = 0
		}
		// Kill it once it has answered killAt steps: the other writers are
		// then anywhere in their steps.
		killAt := 1 + rng.IntN(plParallel*plSteps-1)
		lines := bufio.NewScanner(out)
		answered := 0
		for lines.Scan() {
			tr, n, ok := strings.Cut(lines.Text(), " ")
			if !ok {
				t.Fatalf("child wrote %q", lines.Text())
			}
			step, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("child wrote %q", lines.Text())
			}
			acked[tr] = max(acked[tr], step)
			if answered++; answered == killAt {
				if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
					killed++
				}
			}
			// Every answer printed before the kill is read: the pipe ends at EOF.
		}
		err = cmd.Wait()
		if answered < killAt && err != nil {
			t.Fatalf("round %d: the writer failed before it was killed: %v\n%s", round, err, stderr.String())
		}
		// Check a copy: checking starts a step of each trajectory.
		img, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(cp, img, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := checkBoltFile(cp, acked); err != nil {
			t.Fatalf("round %d, killed after %d answers: %v", round, killAt, err)
		}
	}
	t.Logf("%d rounds, %d writers killed, %d trajectories checked", blRounds, killed, len(acked))
	if killed < blRounds/2 {
		t.Errorf("only %d of %d writers were killed before they finished", killed, blRounds)
	}
}
