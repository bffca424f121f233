package api

// NetworkPolicy is a sandbox's egress policy: the body of PUT
// /v1/sandboxes/{id}/network and the "network" field of a create request.
// Without one a sandbox has loopback only. Allow entries are
// "CIDR[:PORT[-PORT]]" (IPv4; a bare address means /32; no port means every
// port and protocol, a port or range means TCP and UDP to those ports); Rules
// name rule sets the operator defined with `dsec server --network-rule`.
// An empty policy on a sandbox that had egress keeps its link but allows
// nothing.
type NetworkPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Rules []string `json:"rules,omitempty"`
}

// NetworkStatus is the "network" field of a sandbox with egress.
type NetworkStatus struct {
	Allow []string `json:"allow,omitempty"`
	Rules []string `json:"rules,omitempty"`
	// Address is the sandbox's own IPv4 address on its link to the node.
	Address string `json:"address,omitempty"`
	// Denied counts the connection attempts (new flows) the policy refused,
	// including attempts to reach the node itself or another sandbox.
	Denied uint64 `json:"denied"`
}
