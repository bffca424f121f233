package registry

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// endpoint is one place a registry's content is read from.
type endpoint struct {
	host     string // HOST[:PORT]
	insecure bool   // plain HTTP (an http:// URL in hosts.toml)
	resolve  bool   // may resolve tags (containerd's "resolve" capability)
}

// hostsDir reads containerd hosts.toml files.
type hostsDir struct{ dir string }

// hostsFile is the part of containerd's hosts.toml dsec reads.
type hostsFile struct {
	Server string `toml:"server"`
	Host   map[string]struct {
		Capabilities []string `toml:"capabilities"`
		SkipVerify   bool     `toml:"skip_verify"`
		OverridePath bool     `toml:"override_path"`
	} `toml:"host"`
}

// dirName is the directory containerd looks under for reg (docker.io for
// Docker Hub, whatever go-containerregistry calls it).
func dirName(reg name.Registry) string {
	if reg.RegistryStr() == name.DefaultRegistry {
		return "docker.io"
	}
	return reg.RegistryStr()
}

// endpoints lists reg's mirrors in the file's order, then its server (the
// registry itself unless server names another).
func (h *hostsDir) endpoints(reg name.Registry) ([]endpoint, error) {
	self := []endpoint{{host: reg.RegistryStr(), resolve: true}}
	if h.dir == "" {
		return self, nil
	}
	p := filepath.Join(h.dir, dirName(reg), "hosts.toml")
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		p = filepath.Join(h.dir, "_default", "hosts.toml")
		b, err = os.ReadFile(p)
	}
	if errors.Is(err, os.ErrNotExist) {
		return self, nil
	}
	if err != nil {
		return nil, errdefs.Internal(err, "registry hosts %s", p)
	}
	var f hostsFile
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return nil, errdefs.Invalid("registry hosts %s: %v", p, err)
	}
	var eps []endpoint
	// Hosts in the order the file lists them (a map loses it).
	for _, k := range md.Keys() {
		if len(k) != 2 || k[0] != "host" {
			continue
		}
		hc := f.Host[k[1]]
		ep, err := parseEndpoint(k[1], hc.OverridePath)
		if err != nil {
			return nil, errdefs.Invalid("registry hosts %s: %v", p, err)
		}
		caps := hc.Capabilities
		if len(caps) == 0 {
			caps = []string{"pull", "resolve"}
		}
		if !slices.Contains(caps, "pull") {
			continue
		}
		ep.resolve = slices.Contains(caps, "resolve")
		eps = append(eps, ep)
	}
	if f.Server != "" {
		ep, err := parseEndpoint(f.Server, false)
		if err != nil {
			return nil, errdefs.Invalid("registry hosts %s: server: %v", p, err)
		}
		ep.resolve = true
		return append(eps, ep), nil
	}
	return append(eps, self...), nil
}

// parseEndpoint reads a hosts.toml URL: scheme://HOST[:PORT][/v2]. Other
// paths (containerd's override_path) are not supported.
func parseEndpoint(s string, overridePath bool) (endpoint, error) {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return endpoint{}, err
	}
	if u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return endpoint{}, errors.New("host " + s + ": want http(s)://HOST[:PORT]")
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/v2" || overridePath {
		return endpoint{}, errors.New("host " + s + ": a path prefix (override_path) is not supported")
	}
	return endpoint{host: u.Host, insecure: u.Scheme == "http"}, nil
}
