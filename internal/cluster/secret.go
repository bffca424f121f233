package cluster

import (
	"context"
	"time"

	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MinSecretLen is the shortest cluster secret accepted (bytes, after trimming).
const MinSecretLen = 16

// Secret is the cluster secret: agents sign their registration with it and API
// servers authenticate to agents with it.
type Secret struct{ key []byte }

// NewSecret returns a Secret of s (at least MinSecretLen bytes); the file form
// is read by noderpc.LoadSecret, which also checks the file's mode.
func NewSecret(s string) (Secret, error) {
	s = strings.TrimSpace(s)
	if len(s) < MinSecretLen {
		return Secret{}, fmt.Errorf("cluster secret: %d bytes, want at least %d", len(s), MinSecretLen)
	}
	return Secret{key: []byte(s)}, nil
}

// String is the secret itself, for the RPC layer's own authentication.
func (s Secret) String() string { return string(s.key) }

// IsZero reports whether s was never set.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

func (s Secret) mac(payload []byte) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("dsec node record\x00"))
	m.Write(payload)
	return hex.EncodeToString(m.Sum(nil))
}

// signed is a record on the wire: the payload bytes and their MAC.
type signed struct {
	Payload json.RawMessage `json:"payload"`
	MAC     string          `json:"mac"`
}

// seal encodes v and signs it.
func (s Secret) seal(v any) ([]byte, error) {
	p, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(signed{Payload: p, MAC: s.mac(p)})
}

// errBadMAC says a record was not signed with this cluster's secret.
var errBadMAC = errors.New("signature does not verify under this cluster's secret")

// open verifies b and decodes its payload into v.
func (s Secret) open(b []byte, v any) error {
	var env signed
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("malformed record: %w", err)
	}
	want := s.mac(env.Payload)
	if !hmac.Equal([]byte(want), []byte(env.MAC)) {
		return errBadMAC
	}
	if err := json.Unmarshal(env.Payload, v); err != nil {
		return fmt.Errorf("malformed record payload: %w", err)
	}
	return nil
}

// ErrWrongSecret says this process's cluster secret is not the cluster's.
var ErrWrongSecret = errors.New("wrong cluster secret: the cluster's agents and API servers use another one (--cluster-secret-file); nothing was registered")

// CheckSecret proves that s is the cluster's secret before anything is
// registered: the first agent or API server of a cluster stores a MAC of a
// fixed text under s (secret-check), every later one compares its own. A
// mismatch is ErrWrongSecret. (Watchers still verify every record: this check
// is for a clear error, the signatures are the protection.)
func CheckSecret(ctx context.Context, cli *clientv3.Client, prefix string, s Secret) error {
	mine := s.mac([]byte("dsec cluster secret check"))
	theirs, stored, err := putIfAbsent(ctx, cli, newKeys(prefix).secretCheck(), mine)
	if err != nil {
		return fmt.Errorf("cluster: check the cluster secret: %w", err)
	}
	if !stored && !hmac.Equal(theirs, []byte(mine)) {
		return ErrWrongSecret
	}
	return nil
}

// putIfAbsent stores value under key unless the key exists, in one
// transaction; stored says it did, else existing is what the key holds.
func putIfAbsent(ctx context.Context, cli *clientv3.Client, key, value string) (existing []byte, stored bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, false, err
	}
	if resp.Succeeded {
		return nil, true, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0].Value, false, nil
	}
	return nil, false, nil
}
