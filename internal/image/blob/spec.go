package blob

import (
	"net/url"
	"os"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Spec forms, as the CLI's --blob-store flag and environment manifests name a store:
//
//	dir:PATH    a local blob directory (NewDir)
//	posix:PATH  a shared POSIX mount (NewPOSIX)
//	s3://BUCKET?endpoint=HOST:PORT&prefix=P&region=R&insecure=1
//	            an S3-compatible store (NewS3); keys from AWS_ACCESS_KEY_ID and
//	            AWS_SECRET_ACCESS_KEY
//
// ParseSpec checks a spec without opening anything.
func ParseSpec(spec string) (kind, path string, s3 S3Config, err error) {
	switch {
	case strings.HasPrefix(spec, "dir:"), strings.HasPrefix(spec, "posix:"):
		kind, path, _ = strings.Cut(spec, ":")
		if path == "" || !strings.HasPrefix(path, "/") {
			return "", "", s3, errdefs.Invalid("blob store %q: want an absolute path after %s:", spec, kind)
		}
		return kind, path, s3, nil
	case strings.HasPrefix(spec, "s3://"):
		u, perr := url.Parse(spec)
		if perr != nil {
			return "", "", s3, errdefs.Invalid("blob store %q: %v", spec, perr)
		}
		if u.Host == "" {
			return "", "", s3, errdefs.Invalid("blob store %q: no bucket", spec)
		}
		q := u.Query()
		s3 = S3Config{Endpoint: q.Get("endpoint"), Bucket: u.Host, Prefix: q.Get("prefix"), Region: q.Get("region"),
			Insecure: q.Get("insecure") == "1" || q.Get("insecure") == "true"}
		if s3.Endpoint == "" {
			return "", "", s3, errdefs.Invalid("blob store %q: endpoint= is required", spec)
		}
		return "s3", "", s3, nil
	}
	return "", "", s3, errdefs.Invalid("blob store %q: want dir:PATH, posix:PATH or s3://BUCKET?endpoint=HOST:PORT", spec)
}

// Open opens the store a spec names (see ParseSpec). A dir: store is created if
// missing only when create is set; otherwise a missing directory is an
// unavailable error (a node reading layers must not invent an empty store).
func Open(spec string, create bool) (Store, error) {
	kind, path, s3, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "dir":
		if !create {
			if _, err := os.Stat(path); err != nil {
				return nil, errdefs.Wrap(api.CodeUnavailable, err, "blob store %s is unreachable", spec)
			}
		}
		return NewDir(path)
	case "posix":
		return NewPOSIX(path)
	default:
		s3.AccessKey, s3.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		return NewS3(s3)
	}
}
