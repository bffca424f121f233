package e2b_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sign is the e2b SDK's v1 file URL signature.
func sign(path, op, user, token string, exp int64) url.Values {
	raw := path + ":" + op + ":" + user + ":" + token
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
		q.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	sum := sha256.Sum256([]byte(raw))
	q.Set("signature", "v1_"+base64.RawStdEncoding.EncodeToString(sum[:]))
	return q
}

// plain makes a request with no E2B header at all, as a browser would.
func plain(t *testing.T, method, u string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, u, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func TestSignedFileURLs(t *testing.T) {
	e := newEnv(t)
	other := e.create(nil) // a second sandbox: the signature picks the right one
	c := e.create(nil)
	tok := c.EnvdAccessToken
	base := e.srv.URL + "/files?"

	if st, b := plain(t, "POST", base+sign("/tmp/s.txt", "write", "root", tok, 0).Encode(), []byte("signed")); st != http.StatusOK {
		t.Fatalf("signed upload: %d %s", st, b)
	}
	if st, b := plain(t, "GET", base+sign("/tmp/s.txt", "read", "root", tok, time.Now().Unix()+60).Encode(), nil); st != http.StatusOK || string(b) != "signed" {
		t.Fatalf("signed download: %d %q", st, b)
	}
	// The file is in c, not in the other sandbox.
	if res, _ := e.envdCall(other, "GET", "/files?path=/tmp/s.txt&username=root", "", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("the other sandbox has the file: %d", res.StatusCode)
	}
	// E2B's answer for an expired URL, as its SDK's tests expect it.
	if st, b := plain(t, "GET", base+sign("/tmp/s.txt", "read", "root", tok, time.Now().Unix()-10).Encode(), nil); st != http.StatusUnauthorized ||
		strings.TrimSpace(string(b)) != `{"code":401,"message":"signature is already expired"}` {
		t.Fatalf("expired: %d %s", st, b)
	}
	for name, q := range map[string]url.Values{
		"expired":        sign("/tmp/s.txt", "read", "root", tok, time.Now().Unix()-1),
		"write for read": sign("/tmp/s.txt", "write", "root", tok, 0),
		"other path":     func() url.Values { q := sign("/tmp/x", "read", "root", tok, 0); q.Set("path", "/tmp/s.txt"); return q }(),
		"other user": func() url.Values {
			q := sign("/tmp/s.txt", "read", "root", tok, 0)
			q.Set("username", "user")
			return q
		}(),
		"other token": sign("/tmp/s.txt", "read", "root", "not-the-token", 0),
	} {
		if st, b := plain(t, "GET", base+q.Encode(), nil); st != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, st, b)
		}
	}
}
