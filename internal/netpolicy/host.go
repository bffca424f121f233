package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// host is what every dsec Manager on one machine shares, kept in a directory
// under /run (gone with the kernel state it describes at reboot):
//
//	addr/<ip>         a claimed link address, holding "<owner>" (O_EXCL create)
//	forward.lock      flock serializing the two below
//	forward/<holder>  one file per Manager that has egress sandboxes
//	forward.prior     net.ipv4.ip_forward as it was before the first holder
//
// Forwarding is switched on only while some Manager has an egress sandbox,
// and switched back off by the last one if it was off before. While dsec
// holds it on, a guard table drops forwarded traffic that touches no sandbox
// link, so the node does not become a router for anything else.
type host struct {
	dir string
	// own: dir is this network namespace's own (defaultHostDir in a
	// namespace other than the host's initial one); the last Manager to close
	// removes it once it coordinates nothing (removeIfIdle).
	own bool
}

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// initNetIno is the inode of the kernel's initial network namespace on
// kernels that fix it (PROC_NET_INIT_INO, Linux 6.x); older ones number it
// like any other.
const initNetIno = 0xEFFFFFF9

// defaultHostDir is Config.HostDir's default for the calling thread's network
// namespace. What the directory coordinates (link addresses, ip_forward, the
// forward guard) is per namespace, so each namespace has its own: the host's
// initial namespace (pid 1's; where /proc/1 cannot be read, the kernel's
// fixed initial inode) /run/dsec/netpolicy, any other (a node run in a
// network namespace of its own) /run/dsec/netpolicy-netns-INODE. Managers of
// such a node then neither count as holders of the host's forwarding nor
// take its addresses, nor it theirs. own reports the latter: the directory
// goes with the last Manager of that namespace (Manager.Close).
func defaultHostDir() (dir string, own bool) {
	const shared = "/run/dsec/netpolicy"
	var st, initNS unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		return shared, false
	}
	if unix.Stat("/proc/1/ns/net", &initNS) == nil {
		if st.Ino == initNS.Ino && st.Dev == initNS.Dev {
			return shared, false
		}
	} else if st.Ino == initNetIno {
		return shared, false
	}
	return fmt.Sprintf("%s-netns-%d", shared, st.Ino), true
}

// guardTable is the name of the host-wide forward guard.
const guardTable = "dsec-forward-guard"

func (h host) claimPath(a netip.Addr) string { return filepath.Join(h.dir, "addr", a.String()) }

// claim takes a for owner; false if someone else holds it.
func (h host) claim(a netip.Addr, owner string) (bool, error) {
	p := h.claimPath(a)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return false, err
		}
		f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, werr := f.WriteString(owner)
	return true, errors.Join(werr, f.Close())
}

// unclaim releases a if owner holds it.
func (h host) unclaim(a netip.Addr, owner string) error {
	p := h.claimPath(a)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil || string(b) != owner {
		return err
	}
	return os.Remove(p)
}

// claims lists the addresses held by owners starting with prefix.
func (h host) claims(prefix string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	ents, _ := os.ReadDir(filepath.Join(h.dir, "addr"))
	for _, e := range ents {
		a, err := netip.ParseAddr(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(h.claimPath(a)); err == nil && strings.HasPrefix(string(b), prefix) {
			out[a] = string(b)
		}
	}
	return out
}

// lockForward runs fn under the host-wide forwarding lock.
func (h host) lockForward(fn func() error) error {
	f, err := h.openLock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer f.Close()
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// openLock creates the directory as needed and takes forward.lock (how:
// LOCK_EX, with LOCK_NB not waiting: EWOULDBLOCK while another holds it).
// A lock file that removeIfIdle unlinked while this one waited for it locks
// nothing: it is taken again from the path.
func (h host) openLock(how int) (*os.File, error) {
	path := filepath.Join(h.dir, "forward.lock")
	for {
		if err := os.MkdirAll(filepath.Join(h.dir, "forward"), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), how); err != nil {
			f.Close()
			return nil, err
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil &&
			held.Ino == now.Ino && held.Dev == now.Dev {
			return f, nil
		}
		f.Close() // closing drops the lock
	}
}

// removeIfIdle removes the directory when it coordinates nothing any more:
// no Manager holds the lock (tested without waiting), none holds forwarding
// or has a prior ip_forward to restore, no address is claimed. A Manager that
// comes later makes it again.
func (h host) removeIfIdle() error {
	if _, err := os.Stat(h.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	f, err := h.openLock(unix.LOCK_EX | unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil // another user: the last one removes it
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if h.holders() > 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(h.dir, "forward.prior")); !errors.Is(err, os.ErrNotExist) {
		return err // a prior value still to restore (nil: present)
	}
	// os.Remove takes empty directories only: an address claimed meanwhile
	// (claims take no lock) keeps them.
	for _, d := range []string{"addr", "forward"} {
		if err := os.Remove(filepath.Join(h.dir, d)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	// Unlinked while held: a Manager waiting for it takes the lock again
	// from the path (openLock).
	if err := os.Remove(filepath.Join(h.dir, "forward.lock")); err != nil {
		return err
	}
	if err := os.Remove(h.dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

func (h host) holders() int {
	ents, _ := os.ReadDir(filepath.Join(h.dir, "forward"))
	return len(ents)
}

// holdForwarding records holder (a Manager's tag; the file holds its state
// dir) and makes sure the node forwards IPv4.
func (h host) holdForwarding(holder, stateDir string) error {
	return h.lockForward(func() error {
		h.pruneStale()
		mark := filepath.Join(h.dir, "forward", holder)
		if _, err := os.Stat(mark); err == nil {
			return nil
		}
		if h.holders() == 0 {
			// A prior value left by holders that are gone (pruned) is still
			// the host's own; otherwise the current value is.
			priorPath := filepath.Join(h.dir, "forward.prior")
			cur, err := os.ReadFile(priorPath)
			if errors.Is(err, os.ErrNotExist) {
				cur, err = os.ReadFile(ipForward)
			}
			if err != nil {
				return err
			}
			prior := strings.TrimSpace(string(cur))
			if err := os.WriteFile(priorPath, []byte(prior), 0o600); err != nil {
				return err
			}
			if prior == "0" {
				if err := addGuard(); err != nil {
					return fmt.Errorf("forward guard: %w", err)
				}
				if err := os.WriteFile(ipForward, []byte("1"), 0o644); err != nil {
					return fmt.Errorf("enable ip_forward: %w", err)
				}
			}
		}
		return os.WriteFile(mark, []byte(stateDir), 0o600)
	})
}

// AliveFile, in a Manager's state dir, is share-locked (flock) by the
// Manager while it is open.
const AliveFile = "manager.lock"

// holdAlive opens stateDir's AliveFile and takes its shared lock; closing
// the file releases it.
func holdAlive(stateDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(stateDir, AliveFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("netpolicy: lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// managerOpen reports whether a Manager holds stateDir's AliveFile.
func managerOpen(stateDir string) bool {
	f, err := os.Open(filepath.Join(stateDir, AliveFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// pruneStale drops holders that can no longer release: their state dir
// holds no record and no open Manager (the agent is gone for good, e.g. a
// test killed and its data dir removed). Their tables and address claims go
// too. A holder keeps a record from before it takes the hold until it gives
// it up, except while its table lingers after its last sandbox
// (Config.TableLinger): then its open Manager's lock says it is alive. An
// agent killed with sandboxes left keeps their records, and so its hold,
// for when it starts again.
func (h host) pruneStale() {
	dir := filepath.Join(h.dir, "forward")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || len(b) == 0 {
			continue
		}
		stateDir := string(b)
		if recs, _ := filepath.Glob(filepath.Join(stateDir, "*.json")); len(recs) > 0 || managerOpen(stateDir) {
			continue
		}
		if c, err := nftables.New(); err == nil {
			c.DelTable(&nftables.Table{Name: TableName(stateDir), Family: nftables.TableFamilyINet})
			_ = c.Flush() // ENOENT when it is already gone
		}
		for a, owner := range h.claims(e.Name() + "/") {
			_ = h.unclaim(a, owner)
		}
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
}

// releaseForwarding drops holder; the last holder restores ip_forward.
func (h host) releaseForwarding(holder string) error {
	return h.lockForward(func() error {
		mark := filepath.Join(h.dir, "forward", holder)
		if err := os.Remove(mark); errors.Is(err, os.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		if h.holders() > 0 {
			return nil
		}
		priorPath := filepath.Join(h.dir, "forward.prior")
		prior, err := os.ReadFile(priorPath)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(prior)) == "0" {
			if err := os.WriteFile(ipForward, []byte("0"), 0o644); err != nil {
				return fmt.Errorf("restore ip_forward: %w", err)
			}
			if err := delGuard(); err != nil {
				return fmt.Errorf("forward guard: %w", err)
			}
		}
		return os.Remove(priorPath)
	})
}

// addGuard installs the forward guard: forwarded packets that neither come
// from nor go to a dsec sandbox link are dropped.
func addGuard() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Name: guardTable, Family: nftables.TableFamilyINet})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(-1), Policy: &accept})
	c.FlushChain(ch)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(
		ifPrefix(expr.MetaKeyIIFNAME, true), ifPrefix(expr.MetaKeyOIFNAME, true), verdict(expr.VerdictDrop))})
	return c.Flush()
}

func delGuard() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(&nftables.Table{Name: guardTable, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
