package netpolicy

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultPool is where link addresses come from unless configured.
var DefaultPool = netip.MustParsePrefix("10.203.0.0/16")

// Config configures a Manager.
type Config struct {
	// StateDir holds one record per egress sandbox (required; keep it beside
	// the agent's own state so a restarted agent finds it).
	StateDir string
	// Pool is the private IPv4 range link addresses come from, two per
	// sandbox (a /31). Default DefaultPool. Every address in it is
	// unreachable from every sandbox.
	Pool netip.Prefix
	// Rules are the operator's named rule sets.
	Rules RuleSets
	// HostDir is the coordination directory shared by every dsec Manager of
	// one network namespace: default /run/dsec/netpolicy in the host's
	// initial one, /run/dsec/netpolicy-netns-INODE in any other (what it
	// coordinates, link addresses, ip_forward and the forward guard, is per
	// namespace).
	HostDir string
	// DNS is the resolver ("ADDR" or "ADDR:PORT") the node's DNS forwarder
	// asks for its sandboxes (domain rules need it); "" means the first
	// nameserver of the node's /etc/resolv.conf, "off" no forwarder (DNS is
	// then a destination like any other and domain rules are refused).
	DNS string
	// NoHostCheck turns off the host check (hostcheck.go): flows to ports
	// 80 and 443 that a domain rule admits are then let through by the
	// address learned for the name alone, whatever name their TLS SNI or
	// HTTP Host asks for.
	NoHostCheck bool
	// TableLinger is how long the table (and the Manager's hold on
	// forwarding) stays after the last egress sandbox leaves, so that a
	// sandbox made soon after does not rebuild it: a first sandbox's
	// transaction builds the whole table, ~10-25 ms, against ~1 ms for one
	// more sandbox's chain. Default DefaultTableLinger; negative: none.
	TableLinger time.Duration
	Logger      *slog.Logger
}

// DefaultTableLinger is Config.TableLinger's default.
const DefaultTableLinger = 5 * time.Second

// Manager gives sandboxes egress under a policy and takes it away again.
// Sandboxes it was never asked about cost it nothing.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	tag    string // identifies this Manager's objects on the host
	prefix string // link name prefix of this Manager's sandboxes
	rs     *ruleset
	host   host
	fwd    *forwarder // nil: no DNS forwarder
	hck    *hostProxy // nil: no host check

	// alive holds a shared lock on the state dir's AliveFile while the
	// Manager is open: another Manager prunes a holder whose state dir has
	// no record only when nobody holds it (host.pruneStale).
	alive *os.File

	mu      sync.Mutex
	sbx     map[string]*sandbox
	reaping map[string]bool // released, link not yet gone
	reaps   sync.WaitGroup

	nftMu    sync.Mutex // serializes batches and the table's existence
	tableUp  bool
	attached int
	closed   bool          // Close ran: see flush for a change that comes later
	idle     *time.Timer   // drops the table once it has been idle TableLinger
	next     atomic.Uint32 // allocation hint: next pair index to try
	inUse    atomic.Uint64 // pool pairs skipped because the host held them

	qMu     sync.Mutex // guards queue and leading (see commit)
	queue   []*nftOp
	leading bool
}

type sandbox struct {
	mu  sync.Mutex
	rec *record // nil: loopback only
}

var linkEnc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// New opens the Manager, re-adopting the records of sandboxes a previous
// agent process gave egress (their kernel objects are still in place; the
// table is rebuilt from the records if it went missing).
func New(cfg Config) (*Manager, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("netpolicy: StateDir is required")
	}
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 30 || cfg.Pool.Masked() != cfg.Pool {
		return nil, errdefs.Invalid("netpolicy: pool %s must be an IPv4 CIDR of /30 or larger, without host bits", cfg.Pool)
	}
	for _, rv := range reserved {
		if rv.prefix.Overlaps(cfg.Pool) {
			return nil, errdefs.Invalid("netpolicy: pool %s overlaps %s", cfg.Pool, rv.prefix)
		}
	}
	ownHostDir := false
	if cfg.HostDir == "" {
		cfg.HostDir, ownHostDir = defaultHostDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Rules == nil {
		cfg.Rules = RuleSets{}
	}
	if cfg.TableLinger == 0 {
		cfg.TableLinger = DefaultTableLinger
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	sum := sha256.Sum256([]byte(cfg.StateDir))
	m := &Manager{
		cfg:     cfg,
		log:     cfg.Logger,
		tag:     hex.EncodeToString(sum[:4]),
		prefix:  LinkPrefix(cfg.StateDir),
		host:    host{dir: cfg.HostDir, own: ownHostDir},
		sbx:     map[string]*sandbox{},
		reaping: map[string]bool{},
	}
	m.rs = newRuleset(TableName(cfg.StateDir), cfg.Pool, m.prefix)
	var err error
	if m.alive, err = holdAlive(cfg.StateDir); err != nil {
		return nil, err
	}
	recs, err := m.loadRecords()
	if err != nil {
		m.alive.Close()
		return nil, err
	}
	if err := m.startDNS(); err != nil {
		m.alive.Close()
		return nil, err
	}
	for _, r := range recs {
		m.sbx[r.ID] = &sandbox{rec: r}
		m.showDNS(r, true)
	}
	if len(recs) > 0 {
		if err := m.restore(recs); err != nil {
			m.stopDNS()
			m.alive.Close()
			return nil, err
		}
	}
	m.reportPoolUses(recs)
	return m, nil
}

// reportPoolUses warns about every address and route of the host in the
// pool that none of recs (this Manager's own sandboxes) accounts for:
// another node's links, or leftovers of one that is gone. Allocation skips
// the pairs they hold (pairInUse); a route broader than the pool means the
// pool overlaps a network the host reaches, whose addresses sandboxes would
// shadow.
func (m *Manager) reportPoolUses(recs []*record) {
	uses, err := poolUses(m.cfg.Pool)
	if err != nil {
		m.log.Warn("link address pool: cannot scan the host", "pool", m.cfg.Pool, "err", err)
		return
	}
	own := map[string]bool{}
	for _, r := range recs {
		own[r.Link] = true
	}
	claimed := m.host.claims("") // other nodes' sandboxes, coordinated
	for _, u := range uses {
		pair := netip.PrefixFrom(u.prefix.Addr(), 31).Masked()
		switch {
		case own[u.Link]:
		case u.prefix.Bits() >= 31 && claimed[pair.Addr()] != "":
		case !u.addr && u.prefix.Bits() < m.cfg.Pool.Bits():
			m.log.Warn("link address pool overlaps a route of the host; sandboxes shadow its addresses", "pool", m.cfg.Pool, "route", u.prefix, "link", u.Link)
		default:
			m.log.Warn("link address pool: in use on the host, not by this node; will be skipped", "pool", m.cfg.Pool, "held_by", u.What, "link", u.Link)
		}
	}
}

// PairsInUse counts the pool pairs allocation skipped because something on
// the host held them though no claim said so.
func (m *Manager) PairsInUse() uint64 { return m.inUse.Load() }

// restore makes sure the table and every recorded sandbox's chains exist.
func (m *Manager) restore(recs []*record) error {
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return errdefs.Internal(err, "netpolicy: netlink")
	}
	up, err := m.rs.exists(c)
	if err != nil {
		return errdefs.Internal(err, "netpolicy: list table")
	}
	if err := m.host.holdForwarding(m.tag, m.cfg.StateDir); err != nil {
		return errdefs.Internal(err, "netpolicy: forwarding")
	}
	if !up {
		m.log.Warn("network policy table missing; rebuilding from records", "table", m.rs.table.Name, "sandboxes", len(recs))
		if err := m.rs.addBase(c); err != nil {
			return errdefs.Internal(err, "netpolicy: table")
		}
	}
	if err := m.rs.setDNS(c, m.dnsPort()); err != nil {
		return errdefs.Internal(err, "netpolicy: DNS rules")
	}
	if err := c.Flush(); err != nil {
		return errdefs.Internal(err, "netpolicy: restore table")
	}
	m.tableUp, m.attached = true, len(recs)
	m.dropOrphans(recs)
	// Re-add every recorded sandbox's chains (idempotent: each batch flushes
	// and refills them), which also repairs one a crash left half-made. One
	// that cannot be restored loses its link: no sandbox keeps a link
	// without rules.
	for len(recs) > 0 {
		n := min(len(recs), maxBatch)
		chunk := recs[:n]
		recs = recs[n:]
		if err := m.restoreChunk(chunk); err == nil || n == 1 {
			if err != nil {
				m.log.Error("cannot restore sandbox network rules; removing its link", "id", chunk[0].ID, "err", err)
				_ = chunk[0].link().remove()
			}
			continue
		}
		for _, r := range chunk {
			if err := m.restoreChunk([]*record{r}); err != nil {
				m.log.Error("cannot restore sandbox network rules; removing its link", "id", r.ID, "err", err)
				_ = r.link().remove()
			}
		}
	}
	return nil
}

// dropOrphans removes the chains of sandboxes without a record (released
// just before a crash, their removal not yet committed).
func (m *Manager) dropOrphans(recs []*record) {
	live := map[string]bool{}
	for _, r := range recs {
		live[r.Link] = true
	}
	c, err := newConn()
	if err != nil {
		return
	}
	chains, err := c.ListChainsOfTableFamily(m.rs.table.Family)
	if err != nil {
		return
	}
	var orphans []string
	for _, ch := range chains {
		if name, ok := strings.CutPrefix(ch.Name, "p-"); ok && ch.Table.Name == m.rs.table.Name && !live[name] {
			orphans = append(orphans, name)
		}
	}
	for len(orphans) > 0 {
		n := min(len(orphans), maxBatch)
		c, err := newConn()
		if err != nil {
			return
		}
		for _, name := range orphans[:n] {
			if err := m.rs.delSandbox(c, name); err != nil {
				return
			}
		}
		orphans = orphans[n:]
		if err := c.Flush(); err != nil {
			m.log.Warn("remove orphaned sandbox rules", "err", err)
			return
		}
	}
}

// restoreChunk re-adds the chains of recs in one transaction.
func (m *Manager) restoreChunk(recs []*record) error {
	c, err := newConn()
	if err != nil {
		return err
	}
	for _, r := range recs {
		es, err := r.entries()
		if err != nil {
			return fmt.Errorf("record %s: %w", r.ID, err)
		}
		if err := m.rs.addSandbox(c, r.Link, r.Addr, es, len(r.Policy.AllowDomains) > 0, false); err != nil {
			return err
		}
	}
	return c.Flush()
}

// Rules returns the operator's rule sets.
func (m *Manager) Rules() RuleSets { return m.cfg.Rules }

// Pool returns the link address pool.
func (m *Manager) Pool() netip.Prefix { return m.cfg.Pool }

// Resolve validates p against the rule sets and the pool and expands it;
// every error is invalid_argument (not_implemented for domain rules on a
// node without DNS forwarder) and nothing has been touched.
func (m *Manager) Resolve(p api.NetworkPolicy) ([]Entry, error) {
	es, err := m.cfg.Rules.Resolve(p)
	if err != nil {
		return nil, err
	}
	if m.fwd == nil && (len(p.AllowDomains) > 0 || len(p.DenyDomains) > 0) {
		return nil, errdefs.New(api.CodeNotImplemented, "network: domain rules need the node's DNS forwarder, which is off on this node")
	}
	for _, e := range es {
		if m.cfg.Pool.Bits() <= e.Prefix.Bits() && m.cfg.Pool.Contains(e.Prefix.Addr()) {
			return nil, errdefs.Invalid("network: allow entry %q is inside the sandbox link pool %s: other sandboxes are never reachable", e, m.cfg.Pool)
		}
	}
	return es, nil
}

func (m *Manager) entry(id string) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.sbx[id]
	if sb == nil {
		sb = &sandbox{}
		m.sbx[id] = sb
	}
	return sb
}

func (m *Manager) lookup(id string) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sbx[id]
}

func (m *Manager) owner(id string) string { return m.tag + "/" + id }

// linkName names the node end of a sandbox's link. It depends on the
// address too: a sandbox reset (or re-attached) while its old link is still
// going away gets a new address and so a name of its own.
func (m *Manager) linkName(id string, host netip.Addr) string {
	sum := sha256.Sum256([]byte(id + "/" + host.String()))
	return m.prefix + linkEnc.EncodeToString(sum[:8])[:15-len(m.prefix)]
}

// Apply sets sandbox id's policy. The first policy that allows anything
// gives the sandbox a link into the namespace ns (its init's network
// namespace); later calls replace the policy atomically (new flows see the
// new one, established flows go on). An empty policy on a sandbox without a
// link does nothing.
func (m *Manager) Apply(ctx context.Context, id string, ns *os.File, p api.NetworkPolicy) error {
	if !validID(id) {
		return errdefs.Invalid("netpolicy: bad sandbox id %q", id)
	}
	es, err := m.Resolve(p)
	if err != nil {
		return err
	}
	// Domain rules are kept canonical (Resolve has checked them).
	p.AllowDomains, _ = parseDomains("allow_domains", p.AllowDomains)
	p.DenyDomains, _ = parseDomains("deny_domains", p.DenyDomains)
	sb := m.entry(id)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec == nil {
		if len(es) == 0 && len(p.AllowDomains) == 0 {
			return nil
		}
		return m.attach(ctx, sb, id, ns, p, es)
	}
	rec := *sb.rec
	rec.Policy, rec.Entries = p, entryStrings(es)
	keep := slices.Equal(sb.rec.Policy.AllowDomains, p.AllowDomains)
	if err := m.commit(func(c *nftables.Conn) error {
		return m.rs.addSandbox(c, rec.Link, rec.Addr, es, len(p.AllowDomains) > 0, !keep)
	}, 0); err != nil {
		return errdefs.Internal(err, "netpolicy: replace policy of %s", id)
	}
	if err := m.saveRecord(&rec); err != nil {
		return errdefs.Internal(err, "netpolicy: save %s", id)
	}
	sb.rec = &rec
	m.showDNS(&rec, keep)
	return nil
}

// attach gives a sandbox its link and chains; on error nothing is left.
func (m *Manager) attach(ctx context.Context, sb *sandbox, id string, ns *os.File, p api.NetworkPolicy, es []Entry) error {
	if ns == nil {
		return errdefs.Invalid("netpolicy: sandbox %s has no network namespace", id)
	}
	hostAddr, err := m.allocate(id)
	if err != nil {
		return err
	}
	rec := &record{ID: id, Link: m.linkName(id, hostAddr), Host: hostAddr, Addr: hostAddr.Next(), Policy: p, Entries: entryStrings(es)}
	undo := func() {
		_ = rec.link().remove()
		_ = m.host.unclaim(hostAddr, m.owner(id))
	}
	if err := ctx.Err(); err != nil {
		undo()
		return err
	}
	// The record goes first, so whatever a crash leaves half-made is found
	// (and released) by the next agent through it; the rules are in place
	// before the link comes up, so no packet ever leaves it unjudged (a
	// sandbox given egress at runtime has processes that could send at once).
	if err := m.saveRecord(rec); err != nil {
		undo()
		return errdefs.Internal(err, "netpolicy: save %s", id)
	}
	// The rules are committed while the link is made (its ends down), and
	// the link comes up only once they are in place.
	committed := make(chan error, 1)
	go func() {
		committed <- m.commit(func(c *nftables.Conn) error {
			return m.rs.addSandbox(c, rec.Link, rec.Addr, es, len(p.AllowDomains) > 0, true)
		}, +1)
	}()
	up, lerr := rec.link().create(ns)
	if cerr := <-committed; cerr != nil {
		if lerr == nil {
			_ = up(false)
		}
		undo()
		_ = m.removeRecord(id)
		return errdefs.Wrap(errdefs.CodeOf(cerr), cerr, "netpolicy: rules for %s", id) // internal unless classified (a closed Manager: unavailable)
	}
	if lerr == nil {
		lerr = up(true)
	}
	if lerr != nil {
		_ = m.commit(func(c *nftables.Conn) error { return m.rs.delSandbox(c, rec.Link) }, -1)
		undo()
		_ = m.removeRecord(id)
		return errdefs.Internal(lerr, "netpolicy: link for %s", id)
	}
	sb.rec = rec
	m.showDNS(rec, false)
	m.log.Debug("sandbox egress attached", "id", id, "link", rec.Link, "addr", rec.Addr)
	return nil
}

// allocate claims a free /31 in the pool and returns its first address.
func (m *Manager) allocate(id string) (netip.Addr, error) {
	base := m.cfg.Pool.Addr().As4()
	b := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	pairs := uint32(1) << (32 - m.cfg.Pool.Bits() - 1)
	start := m.next.Load()
	for i := uint32(0); i < pairs; i++ {
		idx := (start + i) % pairs
		v := b + 2*idx
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		ok, err := m.host.claim(a, m.owner(id))
		if err != nil {
			return netip.Addr{}, errdefs.Internal(err, "netpolicy: claim address")
		}
		if !ok {
			continue
		}
		u, err := pairInUse(m.cfg.Pool, a)
		if err != nil {
			_ = m.host.unclaim(a, m.owner(id))
			return netip.Addr{}, errdefs.Internal(err, "netpolicy: check address %s", a)
		}
		if u != nil {
			// Not ours to take, though nobody claimed it: skip it, and say so
			// (the host's holder is likely a leftover worth removing).
			m.inUse.Add(1)
			m.log.Warn("link address pool: pair in use on the host; skipped", "addr", netip.PrefixFrom(a, 31), "held_by", u.What, "link", u.Link)
			_ = m.host.unclaim(a, m.owner(id))
			continue
		}
		m.next.Store(idx + 1)
		return a, nil
	}
	return netip.Addr{}, errdefs.New(api.CodeResourceExhausted, "netpolicy: link address pool %s is exhausted", m.cfg.Pool)
}

// Status reports sandbox id's policy and denied counter; nil when the
// sandbox has no egress.
func (m *Manager) Status(id string) (*api.NetworkStatus, error) {
	sb := m.lookup(id)
	if sb == nil {
		return nil, nil
	}
	sb.mu.Lock()
	rec := sb.rec
	sb.mu.Unlock()
	if rec == nil {
		return nil, nil
	}
	c, err := nftables.New()
	if err != nil {
		return nil, errdefs.Internal(err, "netpolicy: netlink")
	}
	n, err := m.rs.denied(c, rec.Link)
	if err != nil {
		return nil, errdefs.Internal(err, "netpolicy: read counter of %s", id)
	}
	if m.fwd != nil {
		n += m.fwd.refused(rec.Addr) // flows the host check reset
	}
	return &api.NetworkStatus{
		Allow: rec.Policy.Allow, Rules: rec.Policy.Rules, AllowDomains: rec.Policy.AllowDomains,
		DenyDomains: rec.Policy.DenyDomains, Address: rec.Addr.String(), Denied: n,
	}, nil
}

// Release removes everything sandbox id had: rules, counter, link, address
// claim and record. The last one out removes the table and gives up
// forwarding. Releasing a sandbox without egress is a no-op.
func (m *Manager) Release(ctx context.Context, id string) error {
	sb := m.lookup(id)
	if sb == nil {
		return nil
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	m.mu.Lock()
	delete(m.sbx, id)
	m.mu.Unlock()
	if sb.rec == nil {
		return nil
	}
	rec := sb.rec
	sb.rec = nil
	if m.fwd != nil {
		m.fwd.set(rec.Addr, nil, false)
	}
	// The link goes down before its rules go, so it carries nothing
	// unjudged while it waits to disappear.
	found, err := rec.link().lookup()
	if err == nil && found != nil {
		_ = netlink.LinkSetDown(found)
	}
	// Its rules go in the next transaction, without waiting: a removal
	// costs milliseconds with hundreds of sandboxes in the table, and the
	// link judges nothing any more.
	m.commitLater(func(c *nftables.Conn) error { return m.rs.delSandbox(c, rec.Link) }, -1)
	err = m.removeRecord(id)
	m.reapLink(id, rec, found)
	if err != nil {
		return errdefs.Internal(err, "netpolicy: release %s", id)
	}
	return nil
}

// reapLink removes a released sandbox's link and then frees its address.
// The link of a sandbox whose init has died goes with its namespace, which
// the kernel tears down in the background, many at a time, far cheaper than
// deleting each link here (a veth delete waits for an RCU grace period under
// the rtnl lock, ~35 ms on a loaded 2-core node, and stalls every create).
// So it waits for that, up to reapWait, and only then deletes the link
// itself (a namespace still alive, e.g. kept open by someone). The address
// stays claimed until the link is gone. Close waits for pending reaps.
func (m *Manager) reapLink(id string, rec *record, found netlink.Link) {
	l := rec.link()
	if found == nil {
		_ = m.host.unclaim(rec.Host, m.owner(id))
		return
	}
	m.mu.Lock()
	m.reaping[id] = true
	m.mu.Unlock()
	m.reaps.Add(1)
	go func() {
		defer m.reaps.Done()
		if !l.awaitGone(found.Attrs().Index, reapWait) {
			if err := l.removeIndex(found.Attrs().Index); err != nil {
				m.log.Warn("remove sandbox link", "id", id, "link", l.ifname, "err", err)
			}
		}
		if err := m.host.unclaim(rec.Host, m.owner(id)); err != nil {
			m.log.Warn("free sandbox address", "id", id, "addr", rec.Host, "err", err)
		}
		m.mu.Lock()
		delete(m.reaping, id)
		m.mu.Unlock()
	}()
}

// reapWait is how long a released link may take to go with its namespace.
const reapWait = 2 * time.Second

// Settle waits until every released sandbox's rules, link and address are
// gone, and drops the table at once when no egress sandbox is left.
func (m *Manager) Settle() {
	m.reaps.Wait()
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if err := m.dropIdleTable(); err != nil {
		m.log.Warn("remove network table", "err", err)
	}
}

// idleTable arms the drop of the table the last egress sandbox has left
// (m.nftMu held): after TableLinger, unless a sandbox comes first.
func (m *Manager) idleTable() {
	if m.cfg.TableLinger < 0 {
		if err := m.dropIdleTable(); err != nil {
			m.log.Warn("remove network table", "err", err)
		}
		return
	}
	if m.idle != nil {
		m.idle.Reset(m.cfg.TableLinger)
		return
	}
	m.idle = time.AfterFunc(m.cfg.TableLinger, func() {
		m.nftMu.Lock()
		defer m.nftMu.Unlock()
		if err := m.dropIdleTable(); err != nil {
			m.log.Warn("remove network table", "err", err)
		}
	})
}

// dropTable deletes the table (if present) and releases forwarding.
func (m *Manager) dropTable(c *nftables.Conn) error {
	var errs []error
	if up, err := m.rs.exists(c); err != nil {
		errs = append(errs, err)
	} else if up {
		c.DelTable(m.rs.table)
		errs = append(errs, c.Flush())
	}
	m.tableUp = false
	errs = append(errs, m.host.releaseForwarding(m.tag))
	return errors.Join(errs...)
}

// Sweep releases what this Manager left behind for sandboxes not in keep:
// their records and everything a record names (a record is written before
// the link and rules it describes, so nothing exists without one), address
// claims without a record; with no egress sandbox left, the table and its
// hold on forwarding too.
func (m *Manager) Sweep(ctx context.Context, keep map[string]bool) {
	m.mu.Lock()
	var gone []string
	for id := range m.sbx {
		if !keep[id] {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	for _, id := range gone {
		m.log.Warn("releasing network of unrecorded sandbox", "id", id)
		if err := m.Release(ctx, id); err != nil {
			m.log.Warn("release leftover network", "id", id, "err", err)
		}
	}
	m.mu.Lock()
	owners := map[string]bool{}
	for id := range m.sbx {
		owners[m.owner(id)] = true
	}
	for id := range m.reaping {
		owners[m.owner(id)] = true
	}
	m.mu.Unlock()
	for a, owner := range m.host.claims(m.tag + "/") {
		if !owners[owner] {
			_ = m.host.unclaim(a, owner)
		}
	}
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if m.attached == 0 {
		if c, err := nftables.New(); err == nil {
			if err := m.dropTable(c); err != nil {
				m.log.Warn("remove leftover network table", "err", err)
			}
		}
	}
}

// Close releases nothing in the kernel: egress sandboxes keep their links and
// rules for the next agent process. It waits for released links to go
// and, with no egress sandbox left, removes the table at once; a network
// namespace's own host directory goes too once nothing uses it
// (host.removeIfIdle).
func (m *Manager) Close() error {
	m.stopDNS()
	m.reaps.Wait()
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	m.closed = true
	if m.idle != nil {
		m.idle.Stop()
	}
	err := m.dropIdleTable()
	m.alive.Close() // after the table: until then another Manager must not prune it
	m.removeOwnDir()
	return err
}

// removeOwnDir removes the coordination directory of a network namespace of
// the Manager's own once nothing uses it (host.removeIfIdle).
func (m *Manager) removeOwnDir() {
	if !m.host.own {
		return
	}
	if err := m.host.removeIfIdle(); err != nil {
		m.log.Warn("remove the network namespace's netpolicy directory", "dir", m.host.dir, "err", err)
	}
}

// dropIdleTable removes the table when no egress sandbox is left (m.nftMu held).
func (m *Manager) dropIdleTable() error {
	if m.attached > 0 || !m.tableUp {
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	return m.dropTable(c)
}

// LinkPrefix starts the name of the node end of every link of the Manager on
// stateDir (what a check for leftover links looks for).
func LinkPrefix(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return linkPrefix + linkEnc.EncodeToString(sum[:2])[:2]
}

// TableName is the name of the inet table of the Manager on stateDir.
func TableName(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "dsec-net-" + hex.EncodeToString(sum[:4])
}

// TableName is the name of this Manager's inet table.
func (m *Manager) TableName() string { return m.rs.table.Name }

// Describe is a one-line summary for logs.
func (m *Manager) Describe() string {
	return fmt.Sprintf("pool %s, rules [%s], table inet %s", m.cfg.Pool, strings.Join(m.cfg.Rules.Names(), " "), m.rs.table.Name)
}
