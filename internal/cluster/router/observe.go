package router

import "time"

// Observer is told about the router's placement work (metrics.Cluster).
type Observer interface {
	// Placed: one sandbox's placement took d (err: nothing fitted).
	Placed(backend string, d time.Duration, err error)
	// Rejected: a node's admission refused a sandbox placed on it.
	Rejected(backend string, err error)
	// Replaced: a rejected sandbox was placed again.
	Replaced(backend string)
}

type nopObserver struct{}

func (nopObserver) Placed(string, time.Duration, error) {}
func (nopObserver) Rejected(string, error)              {}
func (nopObserver) Replaced(string)                     {}
