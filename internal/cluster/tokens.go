package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Tokens is the set of API tokens every API server accepts, kept in etcd as
// SHA-256 digests (each naming its project) and followed by a watch.
type Tokens struct {
	cli *clientv3.Client
	k   keys
	log *slog.Logger
	m   *mirror[tokenRecord]
}

// tokenRecord is the value under tokens/DIGEST.
type tokenRecord struct {
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
	// Project owns the token; empty (tokens made before projects) is the
	// default project.
	Project string `json:"project,omitempty"`
}

func decodeToken(b []byte) (tokenRecord, error) {
	var r tokenRecord
	err := json.Unmarshal(b, &r)
	if r.Project == "" {
		r.Project = api.DefaultProject
	}
	return r, err
}

// OpenTokens loads the token set and follows it until ctx ends. When the cluster
// has no token yet, the first API server to get here creates one (the token in
// tokenFile if that file exists, else a new random one), stores its digest and
// writes the token to tokenFile; every other API server leaves tokenFile alone.
// That first token belongs to the default (admin) project.
func OpenTokens(ctx context.Context, cli *clientv3.Client, prefix, tokenFile, by string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{cli: cli, k: newKeys(prefix), log: log}
	if err := t.bootstrap(ctx, tokenFile, by); err != nil {
		return nil, err
	}
	m, err := openMirror(ctx, cli, t.k.tokens(), decodeToken, log)
	if err != nil {
		return nil, err
	}
	t.m = m
	return t, nil
}

func (t *Tokens) bootstrap(ctx context.Context, tokenFile, by string) error {
	tok := ""
	if b, err := os.ReadFile(tokenFile); err == nil {
		tok = strings.TrimSpace(string(b))
	}
	fromFile := tok != ""
	if !fromFile {
		var raw [24]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		tok = hex.EncodeToString(raw[:])
	}
	rec, _ := json.Marshal(tokenRecord{CreatedAt: time.Now().UTC(), CreatedBy: by})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := t.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.k.tokensInit()), "=", 0)).
		Then(clientv3.OpPut(t.k.tokensInit(), by), clientv3.OpPut(t.k.token(digest(tok)), string(rec))).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: bootstrap the API token: %w", err)
	}
	if !resp.Succeeded {
		return nil // the cluster has its first token already
	}
	if !fromFile {
		if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("cluster: write the token: %w", err)
		}
	}
	t.log.Info("created the cluster's first API token", "token_file", tokenFile)
	return nil
}

// Match reports whether tok is one of the cluster's tokens (an empty token
// matches nothing). Only digests are compared, so timing tells nothing about a
// token.
func (t *Tokens) Match(tok string) bool {
	if tok == "" {
		return false
	}
	_, ok := t.Project(tok)
	return ok
}

// Project returns the project tok belongs to (ok false: not a token).
func (t *Tokens) Project(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	r, _, ok := t.m.get(digest(tok))
	return r.Project, ok
}

// Add stores a new token's digest (for operators: every API server accepts it
// within a watch round trip).
func (t *Tokens) Add(ctx context.Context, tok, by string) error {
	if len(tok) < 16 {
		return fmt.Errorf("cluster: an API token needs at least 16 characters")
	}
	rec, _ := json.Marshal(tokenRecord{CreatedAt: time.Now().UTC(), CreatedBy: by})
	_, err := t.cli.Put(ctx, t.k.token(digest(tok)), string(rec))
	return err
}
