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
	f.Fuzz(func(t *testing.T, h string) {
		if verifyToken(secret, h, now, DefaultMaxSkew) != nil {
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
