// Package app holds one assembly per dsec role: node (dsec server), agent
// (dsec agent, a cluster node) and apiserver (dsec apiserver). Each builds its
// subsystems as a declared list of named steps (lifecycle.Steps), each step
// registering its Close, runs its listeners and loops under one run group
// (lifecycle.Group), and releases everything in reverse order when it stops or
// when start-up fails at any step. cmd/dsec only parses flags into a role's
// Config and calls its Run.
package app
