// Package clustere2e tests a dsec cluster end to end with real processes: a
// 3-member etcd (`dsec etcd`), three agents (`dsec agent`) each in a network
// namespace of its own behind a veth pair, and two API servers (`dsec
// apiserver`). It needs root and the default image; everything it makes (the
// processes, namespaces, links, sandboxes, data dirs) is removed afterwards.
package clustere2e
