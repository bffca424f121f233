package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// ClusterNode is one node as a cluster's API tier sees it (its watcher).
type ClusterNode struct {
	Name  string
	State string // ready, draining, lost
	// CapacitySandboxes is the node's admission limit; Sandboxes what it holds.
	CapacitySandboxes, Sandboxes int64
}

// nodeStates are the node state label values.
var nodeStates = []string{"ready", "draining", "lost"}

// Cluster is the API tier's instruments: the router's Observer (placement
// phase, admission rejections the nodes answered, re-placements, batch
// creates) and the nodes by state, capacity and load, read from the watcher
// at scrape time. Node names are labels: bounded by the cluster's size.
type Cluster struct {
	m            *Metrics
	replacements *prometheus.CounterVec
	nodes        func() []ClusterNode

	nodesDesc, capDesc, loadDesc *prometheus.Desc
}

// NewCluster registers the API tier's instruments in m; nodes lists the
// cluster's nodes at scrape time.
func (m *Metrics) NewCluster(nodes func() []ClusterNode) (*Cluster, error) {
	c := &Cluster{
		m: m, nodes: nodes,
		replacements: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "replacements_total",
			Help: "Creates placed again on another node after their node rejected them, by backend."}, []string{"backend"}),
		nodesDesc: prometheus.NewDesc(namespace+"_cluster_nodes", "Nodes of the cluster, by state (ready, draining, lost).", []string{"state"}, nil),
		capDesc:   prometheus.NewDesc(namespace+"_cluster_node_capacity_sandboxes", "A node's admission limit (sandboxes), as last reported.", []string{"node"}, nil),
		loadDesc:  prometheus.NewDesc(namespace+"_cluster_node_sandboxes", "Sandboxes a node holds, as last reported.", []string{"node"}, nil),
	}
	if err := m.Register(c.replacements, c); err != nil {
		return nil, err
	}
	return c, nil
}

// PlacementSnapshots exports count, the number of placement snapshots the API
// server's engine has taken, as dsec_placement_snapshots_total: a node's new
// state (drained, ready again, freed room) is used for placement from the first
// snapshot that starts after the watcher saw it.
func (c *Cluster) PlacementSnapshots(count func() int64) error {
	return c.m.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "placement_snapshots_total",
		Help: "Placement snapshots of the cluster's nodes this API server has taken."},
		func() float64 { return float64(count()) }))
}

// Placed records the placement phase of a create (err: nothing fitted).
func (c *Cluster) Placed(backend string, d time.Duration, err error) {
	c.m.phaseSeconds.WithLabelValues(c.m.backend(backend), PhasePlacement).Observe(d.Seconds())
}

// Rejected counts a node's admission refusing a create placed on it.
func (c *Cluster) Rejected(backend string, err error) {
	c.m.rejections.WithLabelValues(c.m.backend(backend), codeLabel(errdefs.CodeOf(err))).Inc()
}

// Replaced counts a create placed again after a rejection.
func (c *Cluster) Replaced(backend string) {
	c.replacements.WithLabelValues(c.m.backend(backend)).Inc()
}

// Batch counts a batch create of n sandboxes that took d, as n creates (a
// batch is all or nothing: they share its result and latency).
func (c *Cluster) Batch(backend string, n int, d time.Duration, err error) {
	b, res := c.m.backend(backend), result(err)
	c.m.creates.WithLabelValues(b, res).Add(float64(n))
	h := c.m.createSeconds.WithLabelValues(b, res)
	for range n {
		h.Observe(d.Seconds())
	}
	if err != nil {
		e := errdefs.ToAPI(err)
		c.m.sessionErrors.WithLabelValues("create_batch", codeLabel(e.Code), strconv.FormatBool(e.Infrastructure)).Inc()
	}
}

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodesDesc
	ch <- c.capDesc
	ch <- c.loadDesc
}

// Collect implements prometheus.Collector.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	by := map[string]int{}
	for _, s := range nodeStates {
		by[s] = 0
	}
	for _, n := range c.nodes() {
		by[bounded(n.State, nodeStates)]++
		ch <- prometheus.MustNewConstMetric(c.capDesc, prometheus.GaugeValue, float64(n.CapacitySandboxes), n.Name)
		ch <- prometheus.MustNewConstMetric(c.loadDesc, prometheus.GaugeValue, float64(n.Sandboxes), n.Name)
	}
	for s, v := range by {
		ch <- prometheus.MustNewConstMetric(c.nodesDesc, prometheus.GaugeValue, float64(v), s)
	}
}
