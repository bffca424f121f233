// Package netpolicy gives a sandbox opt-in egress under a policy the trainer
// sets and may replace per task stage, enforced in the kernel with nftables
// on the node's side of a veth pair.
//
// A sandbox starts with loopback only (no link, no rule: no cost). The first
// policy that allows something gives it a veth pair: the node's end dsv…
// holds host/31, the sandbox's end eth0 holds host+1/31 and a default route,
// both from a private pool (Config.Pool) claimed host-wide under
// /run/dsec/netpolicy, and handed out only if no link or route of the host
// holds it (a collision — another node's link, a dead node's leftover — is
// logged, counted in PairsInUse and skipped; inuse.go). Its flows leave
// through the node's uplink, masqueraded.
// A policy is a list of "CIDR[:PORT[-PORT]]" destinations plus names of the
// operator's rule sets (RuleSets); Resolve validates it with clear
// invalid_argument errors before anything is touched.
//
// Why nftables and not eBPF cgroup connect/sendmsg hooks: the hooks attach to
// cgroup v2 directories, and this kind of host runs its controllers on v1
// with a bare cgroup2 mount, so every sandbox would need a second cgroup
// tree only for them; they judge sockets at connect()/sendmsg() time, not
// packets, so they still need a veth, routing and NAT around them; and a
// second mechanism would be needed for masquerading anyway. One nftables
// table per Manager in the node's namespace does all of it: it sees every
// packet a sandbox emits (whatever the socket type), the sandbox cannot
// touch it (it lives outside the sandbox's namespace, whatever capabilities
// the sandbox keeps inside), it masquerades, it keeps a named counter per
// sandbox, and a policy swap is one atomic netlink transaction
// (github.com/google/nftables, no nft process). Per packet, a sandbox's
// traffic jumps through a verdict map keyed by its link to its own short
// chain, so cost does not grow with the number of sandboxes.
//
// What a sandbox can never reach, whatever its policy: any address of the
// node (input hook: every new packet from a sandbox link is denied), another
// sandbox or any address of the pool, loopback, link-local (cloud metadata)
// and multicast ranges; and it cannot send with a source address not its
// own (a reverse-path check before conntrack, so not even inside another
// sandbox's established flow).
// Denied flows are answered at once (TCP reset, ICMP admin-prohibited) and
// counted in the sandbox's counter (Status.Denied); established flows go on
// across a policy change, new ones see the new policy. With the node's DNS
// forwarder (dns.go), every DNS packet of an egress sandbox goes to it and
// domain rules admit the addresses it learned for allowed names; new TCP
// flows so admitted to ports 80 and 443 go through the host check
// (hostcheck.go), which reads their TLS SNI or HTTP Host and lets them
// through only for an allowed name the address was learned for. Without
// the forwarder DNS is a destination like any other. Sandbox links carry
// IPv4 only.
//
// IPv4 forwarding is switched on only while some Manager on the host has an
// egress sandbox (or had one less than Config.TableLinger ago: the table
// stays that long after its last sandbox, so the next one adds only its own
// chain), and restored by the last one out; while dsec holds it on,
// a guard table drops forwarded traffic that touches no sandbox link. A
// record per egress sandbox in Config.StateDir, written before the kernel
// objects it names, lets a restarted agent re-adopt policies and lets Sweep
// and Release remove links, rules, counters, claims and, with the last
// sandbox, the table. Changes are group-committed (commit.go); a release
// takes the link down at once and removes its rules in the next
// transaction without waiting, and leaves the link to the kernel's batched
// namespace teardown.
package netpolicy
