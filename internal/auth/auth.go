// Package auth checks the API tokens every dsec front end accepts (/v1's bearer
// token, SandboxFusion's routes on the main listener, E2B's X-API-Key). Tokens are
// compared as SHA-256 digests in constant time, so neither their content nor their
// length leaks through timing; an empty token matches nothing (fail closed).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Token is the token a request must present.
type Token struct {
	set    bool
	digest [sha256.Size]byte
}

// NewToken returns a Token matching tok; an empty tok matches nothing.
func NewToken(tok string) Token {
	return Token{set: tok != "", digest: sha256.Sum256([]byte(tok))}
}

// Match reports whether got is the token.
func (t Token) Match(got string) bool {
	d := sha256.Sum256([]byte(got))
	return t.set && subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1
}

// Bearer returns the token of an "Authorization: Bearer TOKEN" header.
func Bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// MatchBearer reports whether r carries the token as a bearer token.
func (t Token) MatchBearer(r *http.Request) bool {
	tok, ok := Bearer(r)
	return ok && t.Match(tok)
}

type projectKey struct{}

// WithProject returns ctx carrying the caller's project (the project its
// token belongs to).
func WithProject(ctx context.Context, project string) context.Context {
	return context.WithValue(ctx, projectKey{}, project)
}

// ProjectOf returns the caller's project, "" when ctx carries none (callers
// inside dsec).
func ProjectOf(ctx context.Context) string {
	p, _ := ctx.Value(projectKey{}).(string)
	return p
}
