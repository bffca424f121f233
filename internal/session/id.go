package session

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Sandbox IDs name the node that owns them, so a stateless API tier routes a call
// by its ID alone:
//
//	sb-<16 hex digits>.<node>      e.g. sb-3f2a9c0d1e2b4a5c.gpu-07
//
// The node name is 1..MaxNodeName characters of [a-z0-9-], starting and ending
// with a letter or digit, so an ID is one URL path segment, a file name, a cgroup
// name and a valid host name (the sandbox's own) at once. IDs of the old form
// (sb-<16 hex>, no node) stay valid on the node that made them; NodeOf reports
// that they name none.
const (
	idPrefix = "sb-"
	// MaxNodeName bounds a node name (an ID stays under 64 bytes, the host name
	// limit, and short enough for unix socket paths).
	MaxNodeName = 24
)

// NewID returns a fresh sandbox ID owned by node (a valid node name).
func NewID(node string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return idPrefix + hex.EncodeToString(b[:]) + "." + node
}

// NodeOf returns the node a sandbox ID names; ok is false for an ID that names
// none (an old-style ID, or not a dsec ID at all).
func NodeOf(id string) (node string, ok bool) {
	local, node, found := strings.Cut(id, ".")
	if !found || !strings.HasPrefix(local, idPrefix) || CheckNodeName(node) != nil {
		return "", false
	}
	return node, true
}

// CheckNodeName says why name cannot be a node name (invalid_argument), or nil.
func CheckNodeName(name string) error {
	if name == "" || len(name) > MaxNodeName {
		return errdefs.Invalid("node name %q: must be 1..%d characters", name, MaxNodeName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return errdefs.Invalid("node name %q: only a-z, 0-9 and '-' are allowed", name)
		}
	}
	if name[0] == '-' || name[len(name)-1] == '-' {
		return errdefs.Invalid("node name %q: must start and end with a letter or digit", name)
	}
	return nil
}

// NodeNameFrom turns a host name into a valid node name: its first label,
// lower-cased, every other character a '-', cut to MaxNodeName; "node" if nothing
// is left.
func NodeNameFrom(host string) string {
	host, _, _ = strings.Cut(host, ".")
	b := []byte(strings.ToLower(host))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	name := strings.Trim(string(b), "-")
	if len(name) > MaxNodeName {
		name = strings.TrimRight(name[:MaxNodeName], "-")
	}
	if name == "" {
		return "node"
	}
	return name
}
