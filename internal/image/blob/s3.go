package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// S3Config configures an S3-compatible object store.
type S3Config struct {
	Endpoint  string // host:port (or a URL: http:// implies Insecure)
	Bucket    string
	AccessKey string
	SecretKey string
	Region    string
	Prefix    string // key prefix; blobs are PREFIX/sha256/<hex>
	Insecure  bool   // plain HTTP
	// MaxRetries per request (0 = 3). Each try has a short dial timeout so an
	// unreachable store fails fast with an unavailable (infrastructure) error.
	MaxRetries int
	// TempDir spools Puts whose reader cannot be re-read (default os.TempDir()).
	TempDir string
}

type s3Store struct {
	bucketOK atomic.Bool // the bucket was seen to exist
	c        *minio.Client
	cfg      S3Config
	prefix   string
}

// NewS3 returns a store in an S3-compatible bucket (minio-go; range reads use a
// ranged GET). Nothing is contacted until the first call.
func NewS3(cfg S3Config) (Store, error) {
	ep := cfg.Endpoint
	if u, err := url.Parse(ep); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		ep = u.Host
		if u.Scheme == "http" {
			cfg.Insecure = true
		}
	}
	if ep == "" || cfg.Bucket == "" {
		return nil, errdefs.Invalid("s3 blob store: endpoint and bucket are required")
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, errdefs.Invalid("s3 blob store: bucket %q: %v", cfg.Bucket, err)
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	c, err := minio.New(ep, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     !cfg.Insecure,
		Region:     cfg.Region,
		Transport:  tr,
		MaxRetries: cfg.MaxRetries,
		// Path-style works with every S3 implementation (MinIO, Ceph RGW, 3FS gateways).
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, errdefs.Invalid("s3 blob store %s: %v", ep, err)
	}
	p := strings.Trim(cfg.Prefix, "/")
	if p != "" {
		p += "/"
	}
	cfg.Endpoint = ep
	return &s3Store{c: c, cfg: cfg, prefix: p + "sha256/"}, nil
}

func (s *s3Store) String() string {
	return fmt.Sprintf("s3://%s/%s (endpoint %s)", s.cfg.Bucket, s.prefix, s.cfg.Endpoint)
}

func (s *s3Store) key(digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	return s.prefix + h, nil
}

// classify maps minio-go errors onto errdefs classes.
func (s *s3Store) classify(err error, digest, op string) error {
	if err == nil {
		return nil
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ctxErr(err, op)
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case minio.NoSuchKey, "NotFound":
		return s.notFound(digest)
	case minio.NoSuchBucket:
		return Unavailable(err, "blob %s %s: bucket %q does not exist at %s", op, short(digest), s.cfg.Bucket, s.cfg.Endpoint)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return Unavailable(err, "blob %s %s: s3 store %s refused the credentials", op, short(digest), s.cfg.Endpoint)
	}
	if resp.StatusCode == http.StatusNotFound && resp.Code == "" {
		return s.notFound(digest)
	}
	return Unavailable(err, "blob %s %s: s3 store %s unreachable or failing", op, short(digest), s.cfg.Endpoint)
}

// notFound tells a missing blob from a missing bucket (a HEAD on either is a bare
// 404): a missing bucket is the store's misconfiguration, an infrastructure error.
func (s *s3Store) notFound(digest string) error {
	if !s.bucketOK.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := s.c.BucketExists(ctx, s.cfg.Bucket)
		cancel()
		if err == nil && !ok {
			return Unavailable(fmt.Errorf("no such bucket"), "s3 blob store %s: bucket %q does not exist", s.cfg.Endpoint, s.cfg.Bucket)
		}
		if err == nil {
			s.bucketOK.Store(true)
		}
	}
	return errdefs.NotFound("blob %s not found in %s", digest, s)
}

func (s *s3Store) Put(ctx context.Context, digest string, r io.Reader, size int64) error {
	key, err := s.key(digest)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(err, "put")
	}
	if n, err := s.Stat(ctx, digest); err == nil && (size < 0 || n == size) {
		return nil // content-addressed: already complete
	} else if err != nil && !errdefs.Is(err, api.CodeNotFound) {
		return err
	}
	// Verify before anything becomes visible: an S3 PUT commits whatever body it
	// receives, so the content is hashed first (a seekable reader is re-read, any
	// other reader is spooled to a temp file) and uploaded only if it matches.
	body, n, cleanup, err := s.verified(ctx, digest, r, size)
	if err != nil {
		return err
	}
	defer cleanup()
	opts := minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: n <= 64<<20,
		PartSize:         16 << 20,
	}
	if n == 0 {
		// An empty body would otherwise go out as a chunked streaming upload without
		// a Content-Length, which some S3 servers reject.
		opts.DisableContentSha256 = true
		opts.SendContentMd5 = true
	}
	_, err = s.c.PutObject(ctx, s.cfg.Bucket, key, body, n, opts)
	if err != nil {
		return s.classify(err, digest, "put")
	}
	return nil
}

// verified returns a reader of exactly the verified content and its size.
func (s *s3Store) verified(ctx context.Context, digest string, r io.Reader, size int64) (io.Reader, int64, func(), error) {
	nop := func() {}
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			v := newVerifier(ctx, rs, size)
			if _, err := io.Copy(io.Discard, v); err != nil {
				return nil, 0, nop, s.classify(err, digest, "put")
			}
			if err := v.check(digest); err != nil {
				return nil, 0, nop, err
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, 0, nop, errdefs.Internal(err, "blob put %s: rewind", short(digest))
			}
			// Re-check while uploading: the second pass must match too.
			return &recheck{v: newVerifier(ctx, rs, v.n), digest: digest}, v.n, nop, nil
		}
	}
	f, err := os.CreateTemp(s.cfg.TempDir, "dsec-blob-*")
	if err != nil {
		return nil, 0, nop, errdefs.Internal(err, "blob put %s: spool", short(digest))
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	v := newVerifier(ctx, r, size)
	if _, err := io.Copy(f, v); err != nil {
		cleanup()
		return nil, 0, nop, s.classify(err, digest, "put")
	}
	if err := v.check(digest); err != nil {
		cleanup()
		return nil, 0, nop, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		cleanup()
		return nil, 0, nop, errdefs.Internal(err, "blob put %s: spool", short(digest))
	}
	return &recheck{v: newVerifier(ctx, f, v.n), digest: digest}, v.n, cleanup, nil
}

// recheck hashes the upload body again and fails the request before its last byte
// is handed over if the content changed in between.
type recheck struct {
	v      *verifier
	digest string
}

func (r *recheck) Read(p []byte) (int, error) {
	if rem := r.v.size - r.v.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	if len(p) == 0 {
		return 0, io.EOF
	}
	n, err := r.v.Read(p)
	if r.v.n == r.v.size {
		if cerr := r.v.check(r.digest); cerr != nil {
			return 0, cerr
		}
	}
	if err == io.EOF && r.v.n < r.v.size {
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

func (s *s3Store) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	key, err := s.key(digest)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxErr(err, "open")
	}
	obj, err := s.c.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.classify(err, digest, "open")
	}
	if _, err := obj.Stat(); err != nil { // the GET happens here: classify not_found now
		obj.Close()
		return nil, s.classify(err, digest, "open")
	}
	return &s3Reader{obj: obj, s: s, digest: digest}, nil
}

type s3Reader struct {
	obj    *minio.Object
	s      *s3Store
	digest string
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.classify(err, r.digest, "read")
	}
	return n, err
}
func (r *s3Reader) Close() error { return r.obj.Close() }

func (s *s3Store) ReadAt(ctx context.Context, digest string, p []byte, off int64) (int, error) {
	key, err := s.key(digest)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(err, "read")
	}
	if off < 0 {
		return 0, errdefs.Invalid("blob read %s: negative offset", short(digest))
	}
	if len(p) == 0 {
		return 0, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return 0, errdefs.Invalid("blob read %s: %v", short(digest), err)
	}
	obj, err := s.c.GetObject(ctx, s.cfg.Bucket, key, opts)
	if err != nil {
		return 0, s.classify(err, digest, "read")
	}
	defer obj.Close()
	n, err := io.ReadFull(obj, p)
	switch {
	case err == nil:
		return n, nil
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return n, io.EOF
	}
	if resp := minio.ToErrorResponse(err); resp.Code == "InvalidRange" || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
		// Offset at or past the end: distinguish from a missing blob.
		if _, serr := s.Stat(ctx, digest); serr != nil {
			return 0, serr
		}
		return 0, io.EOF
	}
	return n, s.classify(err, digest, "read")
}

func (s *s3Store) Stat(ctx context.Context, digest string) (int64, error) {
	key, err := s.key(digest)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(err, "stat")
	}
	info, err := s.c.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s.classify(err, digest, "stat")
	}
	return info.Size, nil
}

func (s *s3Store) Delete(ctx context.Context, digest string) error {
	key, err := s.key(digest)
	if err != nil {
		return err
	}
	if _, err := s.Stat(ctx, digest); err != nil { // S3 DELETE of a missing key succeeds
		return err
	}
	if err := s.c.RemoveObject(ctx, s.cfg.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return s.classify(err, digest, "delete")
	}
	return nil
}

func (s *s3Store) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxErr(err, "list")
	}
	out := []string{}
	for obj := range s.c.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.classify(obj.Err, "", "list")
		}
		d := "sha256:" + strings.TrimPrefix(obj.Key, s.prefix)
		if _, err := ParseDigest(d); err == nil {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out, nil
}
