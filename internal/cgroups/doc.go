// Package cgroups manages one control group per sandbox with cpu, memory and
// pids limits plus the freezer, on both cgroup v1 (one hierarchy per
// controller) and cgroup v2 (unified) hosts.
//
// A Hierarchy is detected once per agent with Detect; creating, opening and
// deleting groups afterwards only touches the group's own directories, so the
// sandbox-create hot path costs a few mkdir and write calls. Group names are
// slash-separated relative paths such as "dsec/sb-abc", resolved under the
// Hierarchy's parent (see WithParent) inside every controller's mount.
package cgroups
