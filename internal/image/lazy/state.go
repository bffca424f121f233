package lazy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/mountinfo"
	"github.com/dsec-dev/dsec/pkg/api"
)

// layerd's saved state (ROOT/layerd.state): what a layerd that takes over the FUSE
// connection from the holder needs to serve it on under the same names and node
// IDs as its predecessor, with the same holders. It is rewritten (to a temporary
// file, then renamed) on every mount and unmount; holders added and dropped in
// between are appended to ROOT/layerd.journal (one small write per acquire or
// release instead of rewriting every holder of the node: 1.6 ms per save with
// 5,000 holders), which a save empties and a takeover replays. Never on the read
// path. A process crash leaves the last complete version (the page cache survives
// it; a machine crash takes the mounts with it anyway).

const stateVersion = 1

type savedState struct {
	Version  int          `json:"version"`
	NextNode uint64       `json:"next_node"`
	Layers   []savedLayer `json:"layers"`
}

type savedLayer struct {
	Hex     string    `json:"hex"`
	Digest  string    `json:"digest"`
	Store   string    `json:"store"`
	Size    int64     `json:"size"`
	Chunk   int64     `json:"chunk"`
	Node    uint64    `json:"node"`
	Index   string    `json:"index,omitempty"`
	Holders []string  `json:"holders,omitempty"`
	Idle    time.Time `json:"idle,omitzero"`
	Loop    string    `json:"loop,omitempty"`
	LoopDIO bool      `json:"loop_dio,omitempty"`
	LoopRA  int       `json:"loop_ra,omitempty"`
}

func statePath(root string) string   { return filepath.Join(root, "layerd.state") }
func journalPath(root string) string { return filepath.Join(root, "layerd.journal") }

// holderChange is one journal line: Op "+" adds Holder to Layer (hex), "-" drops it.
type holderChange struct {
	Op     string `json:"op"`
	Layer  string `json:"layer"`
	Holder string `json:"holder"`
}

// journalCompact is how many journal lines trigger a full save.
const journalCompact = 4096

// journalLocked appends holder changes to the journal. Caller holds opMu.
func (d *Daemon) journalLocked(cs []holderChange) {
	if len(cs) == 0 {
		return
	}
	if d.journal == nil || d.journalN+len(cs) > journalCompact {
		d.saveStateLocked()
		return
	}
	var b []byte
	for _, c := range cs {
		j, _ := json.Marshal(c)
		b = append(append(b, j...), '\n')
	}
	if _, err := d.journal.Write(b); err != nil {
		d.log.Error("journal holders; saving the state instead", "err", err)
		d.saveStateLocked()
		return
	}
	d.journalN += len(cs)
}

// replayJournal applies the journal's holder changes to the saved layers (a
// truncated last line, from a crash mid-write, is ignored).
func replayJournal(root string, st *savedState) {
	b, err := os.ReadFile(journalPath(root))
	if err != nil {
		return
	}
	sets := map[string]map[string]bool{}
	for _, sl := range st.Layers {
		sets[sl.Hex] = map[string]bool{}
		for _, h := range sl.Holders {
			sets[sl.Hex][h] = true
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		var c holderChange
		if json.Unmarshal([]byte(line), &c) != nil || sets[c.Layer] == nil {
			continue
		}
		switch c.Op {
		case "+":
			sets[c.Layer][c.Holder] = true
		case "-":
			delete(sets[c.Layer], c.Holder)
		}
	}
	for i, sl := range st.Layers {
		st.Layers[i].Holders = st.Layers[i].Holders[:0]
		for h := range sets[sl.Hex] {
			st.Layers[i].Holders = append(st.Layers[i].Holders, h)
		}
	}
}

// openJournal opens the journal for appending (after a save has emptied it).
func (d *Daemon) openJournal() {
	f, err := os.OpenFile(journalPath(d.cfg.Root), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.log.Error("open journal: every holder change rewrites the state", "err", err)
		return
	}
	d.journal = f
}

// saveStateLocked writes the state. Caller holds opMu (or owns d alone).
func (d *Daemon) saveStateLocked() {
	st := savedState{Version: stateVersion, Layers: []savedLayer{}}
	d.mu.Lock()
	st.NextNode = d.nextNode
	d.mu.Unlock()
	for _, l := range d.snapshot() {
		sl := savedLayer{Hex: l.hex, Digest: l.digest, Store: l.spec, Size: l.size, Chunk: l.chunk, Node: l.node,
			Index: l.index, Idle: l.idle, Loop: l.loop.dev, LoopDIO: l.loop.directIO, LoopRA: l.loop.readAheadKB}
		for h := range l.refs {
			sl.Holders = append(sl.Holders, h)
		}
		st.Layers = append(st.Layers, sl)
	}
	b, _ := json.Marshal(st)
	p := statePath(d.cfg.Root)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		d.log.Error("save state: a crash of layerd now would break the layers it mounted", "err", err)
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		d.log.Error("save state", "err", err)
		return
	}
	// The state has every holder now; replaying the journal again on top of it
	// would change nothing, so a crash before this truncate is harmless.
	if d.journal != nil {
		if err := d.journal.Truncate(0); err != nil {
			d.log.Error("empty journal", "err", err)
		}
	} else {
		_ = os.Remove(journalPath(d.cfg.Root))
	}
	d.journalN = 0
}

func loadState(root string) (savedState, error) {
	var st savedState
	b, err := os.ReadFile(statePath(root))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", statePath(root), err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("%s: version %d, want %d", statePath(root), st.Version, stateVersion)
	}
	return st, nil
}

// takeOver resumes serving the FUSE connection fd (the holder's) with the layers
// of the saved state whose erofs mounts are still there, and has the kernel send
// again what the previous layerd read but did not answer.
func (d *Daemon) takeOver(fd int) error {
	st, err := loadState(d.cfg.Root)
	if err != nil {
		return fmt.Errorf("saved state: %w", err)
	}
	replayJournal(d.cfg.Root, &st)
	if !isFuseMount(FuseDir(d.cfg.Root)) {
		return fmt.Errorf("%s is not a fuse mount any more", FuseDir(d.cfg.Root))
	}
	mounted := mountPoints()
	d.nextNode = max(st.NextNode, fuseRootID+1)
	now := time.Now()
	for _, sl := range st.Layers {
		if _, err := blob.ParseDigest(sl.Digest); err != nil || sl.Size <= 0 || sl.Chunk <= 0 || sl.Node <= fuseRootID || sl.Node >= d.nextNode {
			return fmt.Errorf("saved state: bad layer %+v", sl)
		}
		l := &layerState{
			d: d, digest: sl.Digest, hex: sl.Hex, size: sl.Size, chunk: sl.Chunk, spec: sl.Store, node: sl.Node, index: sl.Index,
			refs: map[string]bool{}, inflight: map[int64]*fetchCall{}, present: map[int64]bool{}, touched: map[int64]bool{},
			mnt: filepath.Join(d.cfg.Root, sl.Hex, "mnt"), idle: sl.Idle,
			loop: loopInfo{dev: sl.Loop, directIO: sl.LoopDIO, readAheadKB: sl.LoopRA},
		}
		l.nchunk = (l.size + l.chunk - 1) / l.chunk
		if !mounted[l.mnt] {
			// Killed while mounting or unmounting it: nothing to serve.
			d.log.Info("saved layer not mounted: dropped", "digest", l.digest)
			_ = os.RemoveAll(filepath.Join(d.cfg.Root, l.hex))
			continue
		}
		l.mounted = true
		for _, h := range sl.Holders {
			l.refs[h] = true
		}
		if len(l.refs) == 0 && l.idle.IsZero() {
			l.idle = now
		}
		if l.store, err = d.store(sl.Store); err != nil {
			// Reads of uncached chunks fail until the store can be opened.
			d.log.Error("reopen blob store", "store", sl.Store, "digest", l.digest, "err", err)
			l.store = brokenStore{err: err}
		}
		l.loadTable()
		if l.table == nil {
			l.table = readHashes(l.indexPath(), l.nchunk)
		}
		for idx := int64(0); idx < l.nchunk; idx++ {
			if d.cache.Has(l.key(idx)) {
				l.present[idx] = true
			}
		}
		d.addLayer(l)
	}
	d.srv, d.fuse, d.resumed = newFuseServer(fd, d, d.log), fd, true
	d.saveStateLocked()
	d.openJournal()
	d.srv.serve()
	if err := d.srv.resend(); err != nil {
		d.log.Error("requests in flight when layerd died may hang", "err", err)
	}
	d.log.Info("took over the fuse connection", "layers", len(d.layers), "next_node", d.nextNode)
	return nil
}

// brokenStore stands for a blob store a resumed layerd could not reopen.
type brokenStore struct {
	blob.Store
	err error
}

func (b brokenStore) ReadAt(context.Context, string, []byte, int64) (int, error) {
	return 0, errdefs.Wrap(api.CodeUnavailable, b.err, "blob store")
}

// mountPoints returns the mount points of this mount namespace.
func mountPoints() map[string]bool {
	ms, _ := mountinfo.Read(mountinfo.Self)
	out := map[string]bool{}
	for _, m := range ms {
		out[m.Point] = true
	}
	return out
}

func isFuseMount(dir string) bool {
	m, err := mountinfo.Top(dir)
	return err == nil && m != nil && strings.HasPrefix(m.FSType, "fuse")
}

// keepHolder makes sure a holder holds this layerd's FUSE descriptor for as long
// as it runs: link (a holder it connected to) or a new one, started again when it
// dies (at once after one that lived, with a growing delay while holders die
// within seconds of their start).
func (d *Daemon) keepHolder(link *holderLink, hc holderConfig) {
	d.keepHolderAfter(link, hc, 0)
}

func (d *Daemon) keepHolderAfter(link *holderLink, hc holderConfig, delay time.Duration) {
	d.holderMu.Lock()
	defer d.holderMu.Unlock()
	if d.closing {
		link.bye()
		return
	}
	if link == nil {
		var err error
		if link, err = startHolder(hc, d.fuse); err != nil {
			d.log.Error("no holder: a crash of layerd would break the layers of running sandboxes", "err", err)
			return
		}
		d.log.Info("started holder", "pid", link.pid)
	}
	d.holder = link
	go func() {
		// The holder sends nothing after the descriptor: a read ends when it dies.
		var b [1]byte
		_, _ = link.conn.Read(b[:])
		d.holderMu.Lock()
		gone := d.closing || d.holder != link
		if !gone {
			d.holder = nil
		}
		d.holderMu.Unlock()
		if gone {
			return
		}
		if !fuseAlive(d.fuse) {
			d.log.Error("fuse connection gone (unmounted or aborted under layerd): no holder started")
			link.conn.Close()
			return
		}
		if link.start.IsZero() || time.Since(link.start) > 10*time.Second {
			delay = 0
		} else {
			delay = min(max(2*delay, holderRestartDelay), holderMaxRestartDelay)
		}
		d.log.Warn("holder died: starting a new one", "pid", link.pid, "delay", delay)
		link.conn.Close()
		time.Sleep(delay)
		d.keepHolderAfter(nil, hc, delay)
	}()
}

// fuseAlive reports whether the FUSE connection of descriptor fd is still up.
func fuseAlive(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd)}}
	_, err := unix.Poll(pfd, 0)
	return err == nil && pfd[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) == 0
}
