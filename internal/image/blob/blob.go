// Package blob stores content-addressed blobs (EROFS layers, manifests) named by
// their sha256 digest. Three implementations share one contract, checked by the
// conformance suite in blobtest: a local directory (the default), an S3-compatible
// object store and a shared POSIX mount (a distributed file system such as 3FS,
// JuiceFS, CephFS or NFS mounted on many nodes at once).
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Store is a content-addressed blob store. A digest is "sha256:<64 lowercase hex>".
type Store interface {
	// Put stores r (exactly size bytes, -1 = unknown) under digest, verifying it; a
	// mismatch → error class invalid_argument ("digest mismatch"), nothing stored.
	// Putting a blob that is already stored succeeds (the reader may be left unread).
	Put(ctx context.Context, digest string, r io.Reader, size int64) error
	// Open returns a reader of the whole blob (caller verifies if it wants).
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
	// ReadAt reads len(p) bytes at off (a range GET for S3); short only at EOF (io.EOF).
	ReadAt(ctx context.Context, digest string, p []byte, off int64) (int, error)
	// Stat returns the blob's size; a not_found class error if missing.
	Stat(ctx context.Context, digest string) (size int64, err error)
	// Delete removes the blob; deleting a missing blob is a not_found error.
	Delete(ctx context.Context, digest string) error
	// List returns the digests of all stored blobs, sorted.
	List(ctx context.Context) ([]string, error)
}

// ErrDigestMismatch is the cause of the error Put returns when content does not hash
// to its digest (or is shorter/longer than the declared size).
var ErrDigestMismatch = errors.New("digest mismatch")

// ParseDigest checks d and returns its hex part.
func ParseDigest(d string) (string, error) {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", errdefs.Invalid("invalid digest %q (want sha256:<64 hex>)", d)
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", errdefs.Invalid("invalid digest %q (want sha256:<64 lowercase hex>)", d)
		}
	}
	return hexPart, nil
}

// FromBytes returns the digest of b.
func FromBytes(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// FromReader hashes r to EOF and returns its digest and length.
func FromReader(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// Verifier copies a Put's content while hashing and counting it.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	ctx  context.Context
	size int64
}

func newVerifier(ctx context.Context, r io.Reader, size int64) *verifier {
	if size >= 0 {
		r = io.LimitReader(r, size+1) // one more byte shows an over-long body
	}
	return &verifier{r: r, h: sha256.New(), ctx: ctx, size: size}
}

func (v *verifier) Read(p []byte) (int, error) {
	if err := v.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	return n, err
}

// check reports whether what was read is exactly the declared size and digest.
func (v *verifier) check(digest string) error {
	if v.size >= 0 && v.n != v.size {
		return errdefs.Wrap(api.CodeInvalidArgument, ErrDigestMismatch, "blob %s: got %d bytes, declared %d", short(digest), v.n, v.size)
	}
	got := "sha256:" + hex.EncodeToString(v.h.Sum(nil))
	if got != digest {
		return errdefs.Wrap(api.CodeInvalidArgument, ErrDigestMismatch, "blob %s: content hashes to %s", short(digest), short(got))
	}
	return nil
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

// Unavailable classifies an error reaching the store itself (network, mount) as
// unavailable: an infrastructure failure, retryable.
func Unavailable(cause error, format string, args ...any) error {
	return errdefs.Wrap(api.CodeUnavailable, cause, format, args...)
}

// ctxErr classifies a context error (cancel → internal with the cause kept, deadline
// → deadline_exceeded via errdefs.CodeOf).
func ctxErr(err error, op string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("blob %s: %w", op, err)
	}
	return errdefs.Wrap(api.CodeUnavailable, err, "blob %s canceled", op)
}

// ReadSmall reads a whole small blob (a chunk index, a prefetch list) and checks
// it against its digest: not_found if the store lacks it, unavailable if the
// store fails, bad_gateway if it is over max bytes or does not hash to digest.
func ReadSmall(ctx context.Context, st Store, digest string, max int64) ([]byte, error) {
	if _, err := ParseDigest(digest); err != nil {
		return nil, err
	}
	n, err := st.Stat(ctx, digest)
	if err != nil {
		if errdefs.CodeOf(err) == api.CodeNotFound {
			return nil, errdefs.NotFound("blob %s not found", digest)
		}
		return nil, errdefs.Wrap(api.CodeUnavailable, err, "stat blob %s", digest)
	}
	if n > max {
		return nil, errdefs.New(api.CodeBadGateway, "blob %s is %d bytes (limit %d)", digest, n, max)
	}
	b := make([]byte, n)
	if got, err := st.ReadAt(ctx, digest, b, 0); int64(got) != n {
		return nil, errdefs.Wrap(api.CodeUnavailable, err, "read blob %s", digest)
	}
	if FromBytes(b) != digest {
		return nil, errdefs.Wrap(api.CodeBadGateway, ErrDigestMismatch, "blob %s does not match its digest", digest)
	}
	return b, nil
}
