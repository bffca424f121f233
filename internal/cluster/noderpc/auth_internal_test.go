package noderpc

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVerifyToken(t *testing.T) {
	secret := []byte("0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	good := "Bearer " + signToken(secret, now)
	if err := verifyToken(secret, good, now.Add(time.Minute), DefaultMaxSkew); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
	for name, h := range map[string]string{
		"empty":        "",
		"not bearer":   "Basic " + signToken(secret, now),
		"version":      "Bearer dsec2." + strings.TrimPrefix(signToken(secret, now), tokenPrefix),
		"no mac":       "Bearer dsec1.1800000000",
		"bad ts":       "Bearer dsec1.+1800000000." + tokenMAC(secret, "+1800000000"),
		"other secret": "Bearer " + signToken([]byte("another secret!!"), now),
		"old":          "Bearer " + signToken(secret, now.Add(-DefaultMaxSkew-time.Second)),
		"future":       "Bearer " + signToken(secret, now.Add(DefaultMaxSkew+time.Second)),
		"flipped mac":  good[:len(good)-1] + "0",
		"long":         good + strings.Repeat("0", maxTokenLen),
	} {
		if name == "flipped mac" && strings.HasSuffix(good, "0") {
			h = good[:len(good)-1] + "1"
		}
		if err := verifyToken(secret, h, now, DefaultMaxSkew); err == nil {
			t.Errorf("%s: %q accepted", name, h)
		}
	}
	if err := verifyToken(nil, good, now, DefaultMaxSkew); err == nil {
		t.Error("a handler without a secret accepted a token")
	}
}

// FuzzVerifyToken: no header makes verifyToken panic, and the only headers it
// accepts are exactly the tokens signToken makes.
func FuzzVerifyToken(f *testing.F) {
	secret := []byte("0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	f.Add("Bearer " + signToken(secret, now))
	f.Add("Bearer dsec1.1800000000.00")
	f.Add("Bearer dsec1.-99999999999999999999.x")
	f.Add("")
	var cache macCache // shared across inputs, as a handler's is
	f.Fuzz(func(t *testing.T, h string) {
		err := verifyToken(secret, h, now, DefaultMaxSkew)
		// The MAC cache changes nothing a header gets: asked twice (the second
		// time from the cache), it answers as without one.
		for range 2 {
			if cerr := verifyTokenCached(&cache, secret, h, now, DefaultMaxSkew); (cerr == nil) != (err == nil) {
				t.Fatalf("%q: %v without the MAC cache, %v with it", h, err, cerr)
			}
		}
		if err != nil {
			return
		}
		rest := strings.TrimPrefix(h, "Bearer "+tokenPrefix)
		ts, _, _ := strings.Cut(rest, ".")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || h != "Bearer "+signToken(secret, time.Unix(sec, 0)) {
			t.Fatalf("accepted %q, which signToken does not make", h)
		}
	})
}

// TestTokenSigner: the cached token is the one signToken makes for the same
// second, and a new second gets a new token.
func TestTokenSigner(t *testing.T) {
	secret := []byte("0123456789abcdef")
	s := &tokenSigner{secret: secret}
	t0 := time.Unix(1_800_000_000, 100)
	for _, now := range []time.Time{t0, t0.Add(500 * time.Millisecond), t0.Add(time.Second), t0.Add(-time.Hour)} {
		if got, want := s.header(now), "Bearer "+signToken(secret, now); got != want {
			t.Errorf("at %v: %q, want %q", now, got, want)
		}
	}
}

// TestMACCache: a MAC cached for one second's token does not make another
// second's header with that MAC pass, and a token is refused for the same
// reasons with the cache as without it.
func TestMACCache(t *testing.T) {
	secret := []byte("0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	var c macCache
	good := "Bearer " + signToken(secret, now)
	for range 2 {
		if err := verifyTokenCached(&c, secret, good, now, DefaultMaxSkew); err != nil {
			t.Fatalf("a good token: %v", err)
		}
	}
	mac := tokenMAC(secret, strconv.FormatInt(now.Unix(), 10))
	forged := "Bearer " + tokenPrefix + strconv.FormatInt(now.Unix()+1, 10) + "." + mac
	if err := verifyTokenCached(&c, secret, forged, now, DefaultMaxSkew); err == nil {
		t.Error("another second's header with a cached MAC was accepted")
	}
	old := "Bearer " + signToken(secret, now.Add(-DefaultMaxSkew-time.Second))
	if err := verifyTokenCached(&c, secret, old, now, DefaultMaxSkew); err == nil {
		t.Error("a stale token was accepted with the cache")
	}
}
