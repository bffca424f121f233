package noderpc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tokens: every request carries "Authorization: Bearer dsec1.<unix seconds>.<mac>",
// mac being hex(HMAC-SHA256(secret, "dsec1.<unix seconds>")). A handler accepts
// a token whose time stamp is within its MaxSkew of its own clock and whose mac
// matches (compared in constant time).
const (
	tokenPrefix = "dsec1."
	// maxTokenLen bounds what verifyToken looks at.
	maxTokenLen = 128
	// minSecretLen is the shortest secret LoadSecret accepts.
	minSecretLen = 16
	maxSecretLen = 4096
)

// LoadSecret reads a cluster secret file (--cluster-secret-file): surrounding
// white space is trimmed; an empty or short secret, or a file others may read
// or write, is refused.
func LoadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster secret %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("cluster secret %s: mode %04o lets every user read or write it; chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretLen+1))
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	if len(b) > maxSecretLen {
		return nil, fmt.Errorf("cluster secret %s: longer than %d bytes", path, maxSecretLen)
	}
	secret := bytes.TrimSpace(b)
	if len(secret) == 0 {
		return nil, fmt.Errorf("cluster secret %s: the file is empty", path)
	}
	if len(secret) < minSecretLen {
		return nil, fmt.Errorf("cluster secret %s: %d bytes; use at least %d (e.g. `head -c 32 /dev/urandom | base64`)", path, len(secret), minSecretLen)
	}
	return secret, nil
}

// signToken makes the bearer token for time now.
func signToken(secret []byte, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return tokenPrefix + ts + "." + tokenMAC(secret, ts)
}

func tokenMAC(secret []byte, ts string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tokenPrefix + ts))
	return hex.EncodeToString(m.Sum(nil))
}

// tokenSigner caches the token of the current second: tokens carry whole
// seconds, so one HMAC a second serves every request.
type tokenSigner struct {
	secret []byte
	last   atomic.Pointer[signedToken]
}

type signedToken struct {
	sec    int64
	header string // "Bearer dsec1...."
}

// header returns the Authorization header value for time now.
func (s *tokenSigner) header(now time.Time) string {
	sec := now.Unix()
	if t := s.last.Load(); t != nil && t.sec == sec {
		return t.header
	}
	t := &signedToken{sec: sec, header: "Bearer " + signToken(s.secret, now)}
	s.last.Store(t)
	return t.header
}

// macCache remembers the expected MAC of recent time stamps, so a handler
// computes one HMAC per second and signer instead of one per request. Only time
// stamps within the allowed skew are kept, and at most maxCachedMACs.
type macCache struct {
	mu   sync.Mutex
	macs map[string]string // time stamp → hex MAC
}

const maxCachedMACs = 64

func (c *macCache) mac(secret []byte, ts string, fresh bool) string {
	if c == nil || !fresh {
		return tokenMAC(secret, ts)
	}
	c.mu.Lock()
	m, ok := c.macs[ts]
	c.mu.Unlock()
	if ok {
		return m
	}
	m = tokenMAC(secret, ts)
	c.mu.Lock()
	if c.macs == nil || len(c.macs) >= maxCachedMACs {
		c.macs = make(map[string]string, maxCachedMACs)
	}
	c.macs[ts] = m
	c.mu.Unlock()
	return m
}

// errBadToken is every refusal's cause; the reason is in its message.
var errBadToken = errors.New("bad cluster token")

// verifyToken checks an Authorization header's value.
func verifyToken(secret []byte, header string, now time.Time, maxSkew time.Duration) error {
	return verifyTokenCached(nil, secret, header, now, maxSkew)
}

// verifyTokenCached is verifyToken taking the expected MAC from c (nil: none).
func verifyTokenCached(c *macCache, secret []byte, header string, now time.Time, maxSkew time.Duration) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: this node has no cluster secret", errBadToken)
	}
	if header == "" {
		return fmt.Errorf("%w: no Authorization header", errBadToken)
	}
	if len(header) > maxTokenLen {
		return fmt.Errorf("%w: too long", errBadToken)
	}
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return fmt.Errorf("%w: not a bearer token", errBadToken)
	}
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return fmt.Errorf("%w: unknown token version", errBadToken)
	}
	ts, mac, ok := strings.Cut(rest, ".")
	if !ok {
		return fmt.Errorf("%w: malformed", errBadToken)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts != strconv.FormatInt(sec, 10) {
		return fmt.Errorf("%w: malformed time stamp", errBadToken)
	}
	skew := now.Sub(time.Unix(sec, 0)).Abs()
	fresh := sec >= -1<<40 && sec <= 1<<40 && skew <= maxSkew
	if !hmac.Equal([]byte(mac), []byte(c.mac(secret, ts, fresh))) {
		return fmt.Errorf("%w: wrong signature (the cluster secrets differ)", errBadToken)
	}
	if !fresh {
		return fmt.Errorf("%w: time stamp %ds off this node's clock (max %s)", errBadToken, int64(skew/time.Second), maxSkew)
	}
	return nil
}
