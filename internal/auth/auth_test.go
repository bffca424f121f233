package auth

import (
	"net/http/httptest"
	"testing"
)

func TestToken(t *testing.T) {
	tok := NewToken("s3cret")
	for _, c := range []struct {
		header string
		want   bool
	}{
		{"Bearer s3cret", true},
		{"bearer s3cret", true},
		{"Bearer  s3cret ", true},
		{"Bearer s3cre", false},
		{"Bearer s3cret2", false},
		{"Basic s3cret", false},
		{"s3cret", false},
		{"", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		if got := tok.MatchBearer(r); got != c.want {
			t.Errorf("%q: got %v, want %v", c.header, got, c.want)
		}
	}
	empty := NewToken("")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer ")
	if empty.MatchBearer(r) || empty.Match("") {
		t.Error("an empty token must match nothing")
	}
}
