package registry

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// keychain gives the credentials a Docker config.json lists for a registry
// ("auths": auth as base64 user:password, or username and password, or an
// identity token); anonymous for any other. Credential helpers are not run.
type keychain struct {
	auths map[string]authn.AuthConfig // by registry host
}

type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

func loadKeychain(path string) (*keychain, error) {
	k := &keychain{auths: map[string]authn.AuthConfig{}}
	if path == "" {
		return k, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return nil, errdefs.Internal(err, "registry credentials %s", path)
	}
	var dc dockerConfig
	if err := json.Unmarshal(b, &dc); err != nil {
		return nil, errdefs.Invalid("registry credentials %s: %v", path, err)
	}
	for key, a := range dc.Auths {
		ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, errdefs.Invalid("registry credentials %s: auth of %s is not base64", path, key)
			}
			u, p, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, errdefs.Invalid("registry credentials %s: auth of %s is not user:password", path, key)
			}
			ac.Username, ac.Password = u, p
		}
		k.auths[hostOf(key)] = ac
	}
	return k, nil
}

// hostOf reduces a config.json key (a host, or a URL such as
// https://index.docker.io/v1/) to its host.
func hostOf(key string) string {
	if _, rest, ok := strings.Cut(key, "://"); ok {
		key = rest
	}
	key, _, _ = strings.Cut(key, "/")
	if key == "docker.io" || key == "registry-1.docker.io" {
		return name.DefaultRegistry
	}
	return key
}

// Resolve implements authn.Keychain.
func (k *keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k.auths[hostOf(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}
