package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The host-side ruleset of one Manager: one inet table holding
//
//	chain prerouting  (filter hook prerouting, raw): from "dsv*", IPv4 source
//	                                         not routed back via that link → drop
//	chain input       (filter hook input):   iifname vmap @inp         → goto d-IF
//	chain forward     (filter hook forward): ct state established,related accept;
//	                                         iifname vmap @pol         → jump p-IF;
//	                                         oifname "dsv*" drop       (nothing new into a sandbox)
//	chain postrouting (nat hook postrouting): ip saddr POOL oifname != "dsv*" masquerade
//
// and per sandbox (IF = its host-side veth):
//
//	chain p-IF: ipv6-icmp drop (link chatter, not an attempt); not ipv4 → goto d-IF;
//	            ip saddr != its address → goto d-IF; daddr in a never-reachable range
//	            the allow list overlaps (pool, loopback, link-local, ...) → goto d-IF;
//	            accept rules for entries inside a private range (named explicitly);
//	            daddr in a private range a broader entry overlaps → goto d-IF;
//	            accept rules for the other entries; goto d-IF
//	chain d-IF: counter denied-IF; tcp → reject with tcp reset; reject with icmpx admin-prohibited
//	chain h-IF (nat, jumped to through @hck from dns-nat): with domain rules
//	            and the host check on, tcp dport 80/443 to an address of the
//	            learned set n-IF → redirect to the host check's port
//
// Everything a sandbox sends passes its veth and so these chains; the sandbox
// cannot change them (they live in the host's network namespace).

const (
	linkPrefix = "dsv" // every dsec sandbox veth on the host starts with this
	setPolicy  = "pol" // ifname → jump p-IF
	setInput   = "inp" // ifname → goto d-IF
	setHost    = "hck" // ifname → jump h-IF (nat: flows the host check sees)
)

func policyChain(ifname string) string { return "p-" + ifname }
func denyChain(ifname string) string   { return "d-" + ifname }
func counterName(ifname string) string { return "denied-" + ifname }
func learnedName(ifname string) string { return "n-" + ifname }
func hostChain(ifname string) string   { return "h-" + ifname }

const (
	chainDNSNat = "dns-nat" // nat prerouting: this Manager's links' DNS → the forwarder
	chainDNSIn  = "dns-in"  // input: what was redirected to the forwarder passes
)

// ruleset builds nftables batches for one table.
type ruleset struct {
	table *nftables.Table
	pool  netip.Prefix
	links string // name prefix of this Manager's links
	// hostPort is the host check's port (0: no check; hostcheck.go).
	hostPort uint16
	// setIDs numbers the sets a transaction names (unique within one);
	// given here, the library does not touch its unsynchronized global
	// counter, which Managers committing at once would race on.
	setIDs atomic.Uint32
}

func newRuleset(name string, pool netip.Prefix, links string) *ruleset {
	return &ruleset{table: &nftables.Table{Name: name, Family: nftables.TableFamilyINet}, pool: pool, links: links}
}

// learnedSet is the set of addresses the DNS forwarder learned for a
// sandbox's allowed domain names, each for its record's TTL.
func (r *ruleset) learnedSet(ifname string) *nftables.Set {
	return &nftables.Set{Table: r.table, Name: learnedName(ifname), KeyType: nftables.TypeIPAddr, HasTimeout: true,
		ID: r.setIDs.Add(1)}
}

func (r *ruleset) set(name string) *nftables.Set {
	return &nftables.Set{Table: r.table, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict,
		ID: r.setIDs.Add(1)}
}

func ifKey(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// addBase queues the table, its maps and base chains (one batch, so the
// table appears complete or not at all).
func (r *ruleset) addBase(c *nftables.Conn) error {
	c.AddTable(r.table)
	pol, inp := r.set(setPolicy), r.set(setInput)
	if err := c.AddSet(pol, nil); err != nil {
		return err
	}
	if err := c.AddSet(inp, nil); err != nil {
		return err
	}
	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: "input", Table: r.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: r.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: r.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: r.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})

	// prerouting, before conntrack: a packet from a sandbox link whose source
	// address is not routed back through that link is dropped (reverse-path
	// check), so no sandbox can speak for another, not even inside another's
	// established flow (which the forward chain accepts by conntrack alone).
	c.AddRule(&nftables.Rule{Table: r.table, Chain: pre, Exprs: concat(
		ifPrefix(expr.MetaKeyIIFNAME, false), nfproto(unix.NFPROTO_IPV4),
		[]expr.Any{&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 0, 0, 0}}},
		verdict(expr.VerdictDrop))})

	// input: link chatter (IPv6 ND/MLD) from any sandbox link is dropped
	// uncounted; every other packet a sandbox sends to the node is denied.
	c.AddRule(&nftables.Rule{Table: r.table, Chain: input, Exprs: concat(
		ifPrefix(expr.MetaKeyIIFNAME, false), l4proto(unix.IPPROTO_ICMPV6), verdict(expr.VerdictDrop))})
	c.AddChain(&nftables.Chain{Name: chainDNSIn, Table: r.table})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: input, Exprs: []expr.Any{
		&expr.Verdict{Kind: expr.VerdictJump, Chain: chainDNSIn}}})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: input, Exprs: vmap(expr.MetaKeyIIFNAME, inp)})
	c.AddChain(&nftables.Chain{Name: chainDNSNat, Table: r.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})

	// forward: replies and flows already allowed pass; new flows from a
	// sandbox go through its policy chain; nothing new enters a sandbox link.
	c.AddRule(&nftables.Rule{Table: r.table, Chain: forward, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: forward, Exprs: vmap(expr.MetaKeyIIFNAME, pol)})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: forward, Exprs: concat(
		ifPrefix(expr.MetaKeyOIFNAME, false), verdict(expr.VerdictDrop))})

	// postrouting: sandbox flows leave with the node's address on the uplink.
	c.AddRule(&nftables.Rule{Table: r.table, Chain: post, Exprs: concat(
		nfproto(unix.NFPROTO_IPV4), daddrOrSaddr(12, r.pool, expr.CmpOpEq),
		ifPrefix(expr.MetaKeyOIFNAME, true), []expr.Any{&expr.Masq{}})})
	return nil
}

// setDNS queues the (re)filling of the DNS chains: every TCP or UDP packet
// to port 53 from one of this Manager's links is redirected to the node's
// forwarder on port (the link's node address), whatever resolver it was
// sent to, and the input chain lets exactly those packets in. port 0: no
// forwarder, DNS is a destination like any other.
//
// With the host check (r.hostPort), the same chains send each of this
// Manager's links through its h-IF chain (addSandbox) and let in what that
// redirected to the host check.
func (r *ruleset) setDNS(c *nftables.Conn, port uint16) error {
	accept := nftables.ChainPolicyAccept
	nat := c.AddChain(&nftables.Chain{Name: chainDNSNat, Table: r.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: chainDNSIn, Table: r.table})
	hck := r.set(setHost)
	if err := c.AddSet(hck, nil); err != nil { // a table made by an older node has none
		return err
	}
	c.FlushChain(nat)
	c.FlushChain(in)
	if port == 0 {
		return nil
	}
	mine := []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(r.links)}}
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		c.AddRule(&nftables.Rule{Table: r.table, Chain: nat, Exprs: concat(mine, nfproto(unix.NFPROTO_IPV4),
			l4proto(proto), dport(53, 53), []expr.Any{
				&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
				&expr.Redir{RegisterProtoMin: 1},
			})})
		c.AddRule(&nftables.Rule{Table: r.table, Chain: in, Exprs: concat(mine, l4proto(proto), dport(port, port),
			dstNATed(), verdict(expr.VerdictAccept))})
	}
	if r.hostPort != 0 {
		c.AddRule(&nftables.Rule{Table: r.table, Chain: nat, Exprs: concat(mine, l4proto(unix.IPPROTO_TCP), vmap(expr.MetaKeyIIFNAME, hck))})
		c.AddRule(&nftables.Rule{Table: r.table, Chain: in, Exprs: concat(mine, l4proto(unix.IPPROTO_TCP), dport(r.hostPort, r.hostPort),
			dstNATed(), verdict(expr.VerdictAccept))})
	}
	return nil
}

// dstNATed matches a flow whose destination was rewritten.
func dstNATed() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ctStatusDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// ctStatusDstNAT is IPS_DST_NAT: the flow's destination was rewritten.
const ctStatusDstNAT = 1 << 5

// addSandbox queues (or, for an existing sandbox, atomically replaces) one
// sandbox's chains and map entries.
// With domains, the addresses in the sandbox's learned set pass too;
// forget empties that set.
func (r *ruleset) addSandbox(c *nftables.Conn, ifname string, addr netip.Addr, entries []Entry, domains, forget bool) error {
	pc := c.AddChain(&nftables.Chain{Name: policyChain(ifname), Table: r.table})
	dc := c.AddChain(&nftables.Chain{Name: denyChain(ifname), Table: r.table})
	c.AddObj(&nftables.CounterObj{Table: r.table, Name: counterName(ifname)})
	learned := r.learnedSet(ifname)
	if err := c.AddSet(learned, nil); err != nil {
		return err
	}
	if forget {
		c.FlushSet(learned)
	}
	c.FlushChain(pc)
	c.FlushChain(dc)

	c.AddRule(&nftables.Rule{Table: r.table, Chain: dc, Exprs: []expr.Any{
		&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: counterName(ifname)}}})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: dc, Exprs: concat(l4proto(unix.IPPROTO_TCP),
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: dc, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}})

	deny := &expr.Verdict{Kind: expr.VerdictGoto, Chain: dc.Name}
	rule := func(e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: r.table, Chain: pc, Exprs: concat(e...)})
	}
	rule(l4proto(unix.IPPROTO_ICMPV6), verdict(expr.VerdictDrop))
	rule([]expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}, deny})
	rule(daddrOrSaddr(12, netip.PrefixFrom(addr, 32), expr.CmpOpNeq), []expr.Any{deny})
	for _, never := range r.never() {
		if overlapsAny(never, entries) {
			rule(daddrOrSaddr(16, never, expr.CmpOpEq), []expr.Any{deny})
		}
	}
	accept := func(e Entry) {
		if e.PortLo == 0 {
			rule(daddrOrSaddr(16, e.Prefix, expr.CmpOpEq), verdict(expr.VerdictAccept))
			return
		}
		for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			rule(daddrOrSaddr(16, e.Prefix, expr.CmpOpEq), l4proto(proto), dport(e.PortLo, e.PortHi), verdict(expr.VerdictAccept))
		}
	}
	if domains {
		// The forwarder learns public addresses only (learn).
		rule([]expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: learned.Name, SetID: learned.ID},
			&expr.Verdict{Kind: expr.VerdictAccept}})
	}
	// Entries inside a private range name it explicitly and pass first;
	// then the private ranges a broader entry ("internet") overlaps are
	// cut out of it; then the broader entries.
	var broad []Entry
	for _, e := range entries {
		if e.Private() {
			accept(e)
		} else {
			broad = append(broad, e)
		}
	}
	for _, p := range private {
		if overlapsAny(p, broad) {
			rule(daddrOrSaddr(16, p, expr.CmpOpEq), []expr.Any{deny})
		}
	}
	for _, e := range broad {
		accept(e)
	}
	rule([]expr.Any{deny})

	// The host check's redirect (an empty chain without domain rules or
	// without the check).
	hc := c.AddChain(&nftables.Chain{Name: hostChain(ifname), Table: r.table})
	c.FlushChain(hc)
	if domains && r.hostPort != 0 {
		for _, port := range hostCheckPorts {
			c.AddRule(&nftables.Rule{Table: r.table, Chain: hc, Exprs: concat(nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP),
				dport(port, port), []expr.Any{
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
					&expr.Lookup{SourceRegister: 1, SetName: learned.Name, SetID: learned.ID},
					&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.hostPort)},
					&expr.Redir{RegisterProtoMin: 1},
				})})
		}
	}
	if err := c.SetAddElements(r.set(setHost), []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: hc.Name}}}); err != nil {
		return err
	}

	pol, inp := r.set(setPolicy), r.set(setInput)
	if err := c.SetAddElements(pol, []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: pc.Name}}}); err != nil {
		return err
	}
	return c.SetAddElements(inp, []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: dc.Name}}})
}

// delSandbox queues the removal of one sandbox's chains, counter and map
// entries. It first (re)creates them empty, so the batch succeeds whether or
// not a crash left them half-made (a batch fails whole on a missing object).
func (r *ruleset) delSandbox(c *nftables.Conn, ifname string) error {
	pcx := c.AddChain(&nftables.Chain{Name: policyChain(ifname), Table: r.table})
	dcx := c.AddChain(&nftables.Chain{Name: denyChain(ifname), Table: r.table})
	c.AddObj(&nftables.CounterObj{Table: r.table, Name: counterName(ifname)})
	if err := c.SetAddElements(r.set(setPolicy), []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: pcx.Name}}}); err != nil {
		return err
	}
	if err := c.SetAddElements(r.set(setInput), []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: dcx.Name}}}); err != nil {
		return err
	}
	hcx := c.AddChain(&nftables.Chain{Name: hostChain(ifname), Table: r.table})
	if err := c.SetAddElements(r.set(setHost), []nftables.SetElement{{Key: ifKey(ifname),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: hcx.Name}}}); err != nil {
		return err
	}
	if err := c.SetDeleteElements(r.set(setHost), []nftables.SetElement{{Key: ifKey(ifname)}}); err != nil {
		return err
	}
	c.FlushChain(hcx)
	c.DelChain(hcx)
	if err := c.SetDeleteElements(r.set(setPolicy), []nftables.SetElement{{Key: ifKey(ifname)}}); err != nil {
		return err
	}
	if err := c.SetDeleteElements(r.set(setInput), []nftables.SetElement{{Key: ifKey(ifname)}}); err != nil {
		return err
	}
	pc := &nftables.Chain{Name: policyChain(ifname), Table: r.table}
	dc := &nftables.Chain{Name: denyChain(ifname), Table: r.table}
	c.FlushChain(pc)
	c.DelChain(pc)
	c.FlushChain(dc)
	c.DelChain(dc)
	c.DeleteObject(&nftables.CounterObj{Table: r.table, Name: counterName(ifname)})
	learned := r.learnedSet(ifname)
	if err := c.AddSet(learned, nil); err != nil {
		return err
	}
	c.DelSet(learned)
	return nil
}

// learn queues adding addrs to a sandbox's learned set for ttl each; those
// in known (still in the set) are removed first, so the timeout restarts on
// kernels that do not refresh it on a re-add.
func (r *ruleset) learn(c *nftables.Conn, ifname string, addrs []netip.Addr, known map[netip.Addr]bool, ttl map[netip.Addr]time.Duration) error {
	set := r.learnedSet(ifname)
	var del, add []nftables.SetElement
	for _, a := range addrs {
		k := a.As4()
		if known[a] {
			del = append(del, nftables.SetElement{Key: k[:]})
		}
		add = append(add, nftables.SetElement{Key: k[:], Timeout: ttl[a]})
	}
	if len(del) > 0 {
		if err := c.SetDeleteElements(set, del); err != nil {
			return err
		}
	}
	return c.SetAddElements(set, add)
}

// denied reads a sandbox's denied counter (packets that opened no flow).
func (r *ruleset) denied(c *nftables.Conn, ifname string) (uint64, error) {
	o, err := c.GetObject(&nftables.CounterObj{Table: r.table, Name: counterName(ifname)})
	if err != nil {
		return 0, err
	}
	co, ok := o.(*nftables.CounterObj)
	if !ok {
		return 0, fmt.Errorf("counter %s: unexpected object %T", counterName(ifname), o)
	}
	return co.Packets, nil
}

// exists reports whether the table is present in the kernel.
func (r *ruleset) exists(c *nftables.Conn) (bool, error) {
	_, err := c.ListTableOfFamily(r.table.Name, r.table.Family)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

// never lists the destinations no policy reaches: the pool (other sandboxes
// and the node's side of every link) and the reserved ranges.
func (r *ruleset) never() []netip.Prefix {
	out := []netip.Prefix{r.pool}
	for _, rv := range reserved {
		out = append(out, rv.prefix)
	}
	return out
}

func overlapsAny(p netip.Prefix, entries []Entry) bool {
	for _, e := range entries {
		if e.Prefix.Overlaps(p) {
			return true
		}
	}
	return false
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func nfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// ifPrefix matches (or, negated, does not match) an interface name starting
// with the dsec link prefix.
func ifPrefix(key expr.MetaKey, negate bool) []expr.Any {
	op := expr.CmpOpEq
	if negate {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte(linkPrefix)}}
}

func vmap(key expr.MetaKey, s *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, IsDestRegSet: true, DestRegister: 0}}
}

// daddrOrSaddr matches the IPv4 address at offset (12 source, 16
// destination) against p. The caller ensures the packet is IPv4 (through
// nfproto, or because only IPv4 reaches that rule).
func daddrOrSaddr(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	a := p.Addr().As4()
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = []byte{0, 0, 0, 0}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: a[:]},
	}
}

func dport(lo, hi uint16) []expr.Any {
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	if lo == hi {
		return []expr.Any{load, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(lo)}}
	}
	return []expr.Any{load, &expr.Range{Op: expr.CmpOpEq, Register: 1,
		FromData: binaryutil.BigEndian.PutUint16(lo), ToData: binaryutil.BigEndian.PutUint16(hi)}}
}
