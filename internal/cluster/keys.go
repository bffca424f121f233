package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DefaultPrefix is the key prefix of a dsec cluster in etcd.
const DefaultPrefix = "/dsec/"

// keys builds the key layout (see the package doc) under one prefix.
type keys struct{ prefix string }

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return keys{prefix}
}

func (k keys) nodes() string              { return k.prefix + "n/" }
func (k keys) live(name string) string    { return k.prefix + "n/live/" + name }
func (k keys) known(name string) string   { return k.prefix + "n/known/" + name }
func (k keys) drain(name string) string   { return k.prefix + "n/drain/" + name }
func (k keys) tokens() string             { return k.prefix + "tokens/" }
func (k keys) token(digest string) string { return k.prefix + "tokens/" + digest }
func (k keys) tokensInit() string         { return k.prefix + "tokens-init" }
func (k keys) projects() string           { return k.prefix + "projects/" }
func (k keys) project(name string) string { return k.prefix + "projects/" + name }
func (k keys) quota(name string) string   { return k.prefix + "quota/" + name + "/" }
func (k keys) usage(name string) string   { return k.prefix + "quota/" + name + "/usage" }
func (k keys) reservations(name string) string {
	return k.prefix + "quota/" + name + "/r/"
}
func (k keys) reservation(name, id string) string { return k.reservations(name) + id }
func (k keys) secretCheck() string                { return k.prefix + "secret-check" }
func (k keys) request(id string) string           { return k.prefix + "req/" + digest(id) }

// nodeKey splits a key under nodes() into its kind (live, known, drain) and node.
func (k keys) nodeKey(key string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, k.nodes())
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, "/")
	return kind, name, ok && name != ""
}

func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}
