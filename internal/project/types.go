package project

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Default is the admin project (api.DefaultProject): the first token's.
const Default = api.DefaultProject

// Create limits a request without them counts with (the agent's defaults).
const (
	DefaultMilliCPU    = 1000
	DefaultMemoryBytes = 512 << 20
)

// Quota limits a project; a zero field is unlimited.
type Quota struct {
	MaxSandboxes int64 `json:"max_sandboxes,omitempty"`
	MilliCPU     int64 `json:"milli_cpu,omitempty"`
	MemoryBytes  int64 `json:"memory_bytes,omitempty"`
}

// Limited reports whether any limit is set.
func (q Quota) Limited() bool { return q.MaxSandboxes > 0 || q.MilliCPU > 0 || q.MemoryBytes > 0 }

// Usage is what sandboxes hold (Sandboxes counts them).
type Usage struct {
	Sandboxes   int64 `json:"sandboxes"`
	MilliCPU    int64 `json:"milli_cpu"`
	MemoryBytes int64 `json:"memory_bytes"`
}

// Add returns u+o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.Sandboxes + o.Sandboxes, u.MilliCPU + o.MilliCPU, u.MemoryBytes + o.MemoryBytes}
}

// Sub returns u-o, each field at least 0.
func (u Usage) Sub(o Usage) Usage {
	return Usage{max(0, u.Sandboxes-o.Sandboxes), max(0, u.MilliCPU-o.MilliCPU), max(0, u.MemoryBytes-o.MemoryBytes)}
}

// Check returns quota_exceeded, naming the first quota have+add would pass.
func (q Quota) Check(project string, have, add Usage) error {
	next := have.Add(add)
	switch {
	case q.MaxSandboxes > 0 && next.Sandboxes > q.MaxSandboxes:
		return errdefs.New(api.CodeQuotaExceeded, "project %q is at its max_sandboxes quota: %d live or being created, limit %d, this create asks for %d more",
			project, have.Sandboxes, q.MaxSandboxes, add.Sandboxes)
	case q.MilliCPU > 0 && next.MilliCPU > q.MilliCPU:
		return errdefs.New(api.CodeQuotaExceeded, "project %q is at its cpu quota: %g cores in use, limit %g, this create asks for %g more",
			project, cores(have.MilliCPU), cores(q.MilliCPU), cores(add.MilliCPU))
	case q.MemoryBytes > 0 && next.MemoryBytes > q.MemoryBytes:
		return errdefs.New(api.CodeQuotaExceeded, "project %q is at its memory_bytes quota: %d bytes in use, limit %d, this create asks for %d more",
			project, have.MemoryBytes, q.MemoryBytes, add.MemoryBytes)
	}
	return nil
}

func cores(milli int64) float64 { return float64(milli) / 1000 }

// Reservation is usage held for one create, batch or fork: Sandboxes members.
type Reservation struct {
	ID        string    `json:"id"`
	Usage     Usage     `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
	// Version is the store's version of the record (0: absent); Adjust
	// compares it.
	Version int64 `json:"-"`
}

// TokenInfo describes a token (its ID is a digest prefix; the token is never
// stored).
type TokenInfo struct {
	ID        string
	CreatedAt time.Time
}

// Info is a project as stored.
type Info struct {
	Name      string
	Quota     Quota
	Usage     Usage
	Tokens    []TokenInfo
	CreatedAt time.Time
	// Registries are the hosts the project holds registry credentials for
	// (sorted; never the credentials themselves).
	Registries []string
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CheckName validates a project name: 1..63 of a-z 0-9 _ -, starting with a
// letter or digit.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return errdefs.Invalid("project name %q: want 1..63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// CheckQuota rejects negative limits.
func CheckQuota(q Quota) error {
	if q.MaxSandboxes < 0 || q.MilliCPU < 0 || q.MemoryBytes < 0 {
		return errdefs.Invalid("quota %+v: limits are 0 (unlimited) or positive", q)
	}
	return nil
}

// Digest is a token's SHA-256 digest in hex (what stores keep).
func Digest(tok string) string {
	d := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(d[:])
}

// TokenID is the short ID of a token digest (its first 12 hex digits).
func TokenID(digest string) string { return digest[:12] }

// NewToken returns a fresh random token (48 hex digits).
func NewToken() (string, error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("project: new token: %w", err)
	}
	return hex.EncodeToString(raw[:]), nil
}

// NewReservationID returns a fresh reservation ID.
func NewReservationID() string {
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	return "r-" + hex.EncodeToString(raw[:])
}

// ToAPI converts a quota to its wire form.
func (q Quota) ToAPI() api.Quota {
	return api.Quota{MaxSandboxes: q.MaxSandboxes, CPU: cores(q.MilliCPU), MemoryBytes: q.MemoryBytes}
}

// QuotaFromAPI converts the wire form (cores) to a Quota (millicores).
func QuotaFromAPI(q api.Quota) Quota {
	return Quota{MaxSandboxes: q.MaxSandboxes, MilliCPU: int64(q.CPU*1000 + 0.5), MemoryBytes: q.MemoryBytes}
}

// ToAPI converts an Info to its wire form.
func (i Info) ToAPI() api.Project {
	p := api.Project{Name: i.Name, Quota: i.Quota.ToAPI(), CreatedAt: i.CreatedAt, Tokens: []api.ProjectToken{},
		Usage: api.Usage{Sandboxes: i.Usage.Sandboxes, CPU: cores(i.Usage.MilliCPU), MemoryBytes: i.Usage.MemoryBytes}}
	for _, t := range i.Tokens {
		p.Tokens = append(p.Tokens, api.ProjectToken{ID: t.ID, CreatedAt: t.CreatedAt})
	}
	p.Registries = slices.Clone(i.Registries)
	return p
}

// UsageOf is what a create request holds (its limits, the defaults for unset ones).
func UsageOf(req api.CreateSandboxRequest) Usage {
	u := Usage{Sandboxes: 1, MilliCPU: int64(req.CPU*1000 + 0.5), MemoryBytes: req.MemoryBytes}
	if req.CPU == 0 {
		u.MilliCPU = DefaultMilliCPU
	}
	if u.MemoryBytes == 0 {
		u.MemoryBytes = DefaultMemoryBytes
	}
	return u
}

// UsageOfSandbox is what a live sandbox holds.
func UsageOfSandbox(sb api.Sandbox) Usage {
	return Usage{Sandboxes: 1, MilliCPU: int64(sb.CPU*1000 + 0.5), MemoryBytes: sb.MemoryBytes}
}

// hostnameRE is a DNS name or IPv4 address: dot-separated labels of a-z 0-9 -.
var hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

// RegistryHost normalises a registry host as the registry client compares
// them: lower case, and Docker Hub's other names (index.docker.io,
// registry-1.docker.io) as docker.io. It does not validate (CheckRegistryHost
// does).
func RegistryHost(host string) string {
	h := strings.ToLower(host)
	if h == "index.docker.io" || h == "registry-1.docker.io" {
		return "docker.io"
	}
	return h
}

// CheckRegistryHost validates a registry host HOST[:PORT] as an image
// reference names it (a DNS name, an IPv4 address or a bracketed IPv6
// address; no scheme, path or user) and returns it normalised (RegistryHost).
func CheckRegistryHost(host string) (string, error) {
	bad := func() (string, error) {
		return "", errdefs.Invalid("registry host %q: want HOST[:PORT] as an image reference names it, e.g. ghcr.io, registry.example.com:5000 or docker.io (no scheme or path)", host)
	}
	h := RegistryHost(host)
	if h == "" || len(h) > 255 {
		return bad()
	}
	name := h
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		n, port, err := net.SplitHostPort(h)
		if strings.HasPrefix(h, "[") && err != nil && strings.HasSuffix(h, "]") {
			n, port, err = strings.Trim(h, "[]"), "", nil // [v6] without a port
		}
		if err != nil {
			return bad()
		}
		if port != "" {
			if p, perr := strconv.Atoi(port); perr != nil || p < 1 || p > 65535 || port[0] == '0' {
				return bad()
			}
		}
		if strings.HasPrefix(h, "[") {
			if ip := net.ParseIP(n); ip == nil || ip.To4() != nil {
				return bad()
			}
			return h, nil
		}
		name = n
	}
	if !hostnameRE.MatchString(name) {
		return bad()
	}
	return h, nil
}

// CheckRegistryAuth validates credentials for SetRegistryAuth: a user name
// and a password, both non-empty.
func CheckRegistryAuth(a api.RegistryAuth) error {
	if a.Username == "" {
		return errdefs.Invalid("registry credentials: username is empty")
	}
	if a.Password == "" {
		return errdefs.Invalid("registry credentials: password is empty")
	}
	return nil
}

// RegistryHosts returns m's hosts, sorted (nil when none): what Info shows.
func RegistryHosts(m map[string]api.RegistryAuth) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}
