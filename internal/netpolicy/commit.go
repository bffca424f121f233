package netpolicy

import (
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// nftOp is one sandbox's change to the ruleset, waiting for a batch.
type nftOp struct {
	apply func(c *nftables.Conn) error
	delta int // change of the attached count once committed
	done  chan error
}

// maxBatch bounds one transaction (and the acknowledgements it returns).
const maxBatch = 64

// commit queues one change and returns once a transaction holding it has
// been committed (group commit). A transaction costs the kernel about the
// same whether it holds one sandbox's change or fifty, and a removal costs
// milliseconds with hundreds of sandboxes in the table, so changes that
// arrive while one transaction is in flight go together in the next one.
// The first egress sandbox's transaction creates the table (and takes the
// hold on forwarding); one that leaves no sandbox drops the table.
func (m *Manager) commit(apply func(c *nftables.Conn) error, delta int) error {
	op := &nftOp{apply: apply, delta: delta, done: make(chan error, 1)}
	m.qMu.Lock()
	m.queue = append(m.queue, op)
	lead := !m.leading
	m.leading = true
	m.qMu.Unlock()
	if lead {
		m.lead()
	}
	return <-op.done
}

// commitLater queues a change without waiting for it (a released sandbox's
// rules: its link is already down, so they judge nothing any more); Settle
// waits for it.
func (m *Manager) commitLater(apply func(c *nftables.Conn) error, delta int) {
	m.reaps.Add(1)
	go func() {
		defer m.reaps.Done()
		if err := m.commit(apply, delta); err != nil {
			m.log.Warn("remove sandbox network rules", "err", err)
		}
	}()
}

// lead commits queued changes until the queue is empty.
func (m *Manager) lead() {
	for {
		m.qMu.Lock()
		n := min(len(m.queue), maxBatch)
		batch := m.queue[:n:n]
		m.queue = m.queue[n:]
		if n == 0 {
			m.leading = false
			m.qMu.Unlock()
			return
		}
		m.qMu.Unlock()
		m.nftMu.Lock()
		err := m.flush(batch)
		if err != nil && len(batch) > 1 {
			// One bad change fails the whole transaction: find it by
			// committing each on its own.
			for _, op := range batch {
				op.done <- m.flush([]*nftOp{op})
			}
		} else {
			for _, op := range batch {
				op.done <- err
			}
		}
		m.nftMu.Unlock()
	}
}

func newConn() (*nftables.Conn, error) {
	return nftables.New(nftables.WithSockOptions(func(c *netlink.Conn) error {
		return c.SetReadBuffer(4 << 20) // room for a full batch's acknowledgements
	}))
}

// flush commits batch as one transaction; the caller holds nftMu.
func (m *Manager) flush(batch []*nftOp) error {
	if m.closed {
		// A change after Close (a sandbox released while its node shut
		// down): removals still go, nothing is added, and a table Close
		// dropped is neither made again nor forwarding held again.
		for _, op := range batch {
			if op.delta > 0 {
				return errdefs.New(api.CodeUnavailable, "netpolicy: the node's network policy manager is closed")
			}
		}
		if !m.tableUp {
			return nil
		}
	}
	c, err := newConn()
	if err != nil {
		return err
	}
	fresh := !m.tableUp
	if fresh {
		if err := m.host.holdForwarding(m.tag, m.cfg.StateDir); err != nil {
			return err
		}
		up, err := m.rs.exists(c)
		if err != nil {
			return err
		}
		if !up {
			if err := m.rs.addBase(c); err != nil {
				return err
			}
		}
		if err := m.rs.setDNS(c, m.dnsPort()); err != nil {
			return err
		}
	}
	for _, op := range batch {
		if err := op.apply(c); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		if fresh && m.attached == 0 {
			_ = m.host.releaseForwarding(m.tag)
		}
		return err
	}
	m.tableUp = true
	for _, op := range batch {
		m.attached += op.delta
	}
	if m.attached <= 0 {
		m.attached = 0
		if !m.closed {
			m.idleTable()
		} else {
			// the last sandbox left a closed Manager, whose linger nothing
			// would end: the table and the hold go now, as Close would
			// have dropped them had the sandbox left first
			if err := m.dropIdleTable(); err != nil {
				m.log.Warn("remove network table", "err", err)
			}
			m.removeOwnDir()
		}
	}
	return nil
}
