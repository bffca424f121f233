package e2b

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// File metadata as envd 0.6.2 keeps it: an upload's X-Metadata-KEY headers
// become the file's extended attributes user.e2b.KEY (KEY lowercased), and
// every EntryInfo reports them, prefix stripped, as metadata. An upload
// replaces the file and so its metadata: one without X-Metadata-* headers
// leaves none. A file with metadata is written as a one-entry tar whose PAX
// records carry the attributes (session.FS.ExtractTar applies them), since
// session.FS has no call of its own for attributes.

const (
	metadataHeaderPrefix = "X-Metadata-"
	metadataXattrPrefix  = "user.e2b."
	// maxMetadataKey is the longest key: the VFS's 255-byte attribute name
	// limit less the prefix.
	maxMetadataKey = 255 - len(metadataXattrPrefix)
	// maxMetadataBytes bounds a file's metadata (keys with their prefix plus
	// values), as envd does, to stay within one inode's attribute space.
	maxMetadataBytes = 4096
)

// uploadMetadata reads the metadata an upload's headers carry (nil for none):
// keys lowercased, the first value of a repeated header, keys and values
// printable US-ASCII within envd's limits (else invalid_argument).
func uploadMetadata(hd http.Header) (map[string]string, error) {
	var out map[string]string
	total := 0
	for name, vals := range hd {
		key, ok := strings.CutPrefix(http.CanonicalHeaderKey(name), metadataHeaderPrefix)
		if !ok || len(vals) == 0 {
			continue
		}
		key = strings.ToLower(key)
		v := vals[0]
		switch {
		case key == "":
			return nil, errdefs.Invalid("metadata key is empty")
		case len(key) > maxMetadataKey:
			return nil, errdefs.Invalid("metadata key %q is longer than %d bytes", key, maxMetadataKey)
		case !printableASCII(key):
			return nil, errdefs.Invalid("metadata key %q is not printable US-ASCII", key)
		case !printableASCII(v):
			return nil, errdefs.Invalid("metadata value for key %q is not printable US-ASCII", key)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = v
		total += len(metadataXattrPrefix) + len(key) + len(v)
	}
	if total > maxMetadataBytes {
		return nil, errdefs.Invalid("metadata takes %d bytes, more than %d", total, maxMetadataBytes)
	}
	return out, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// entryMetadata is the metadata of a file's attributes (nil for none).
func entryMetadata(xattrs map[string]string) map[string]string {
	var out map[string]string
	for k, v := range xattrs {
		if key, ok := strings.CutPrefix(k, metadataXattrPrefix); ok && key != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = v
		}
	}
	return out
}

// writeWithMetadata writes body to file p (whose parent exists) as a, with
// meta as its attributes: the body is spooled to a temporary file (a tar
// entry states its size first), at most max bytes, then extracted into p's
// directory, replacing what was at p. The mode of a replaced regular file is
// kept (0644 for a new one).
func writeWithMetadata(ctx context.Context, fs session.FS, a account, p string, body io.Reader, meta map[string]string, max int64) error {
	spool, err := os.CreateTemp("", "dsec-e2b-upload-*")
	if err != nil {
		return errdefs.Internal(err, "write %s: spool the upload", p)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	in := body
	if max > 0 {
		in = io.LimitReader(body, max+1)
	}
	n, err := io.Copy(spool, in)
	switch {
	case err != nil:
		return errdefs.Wrap(api.CodeInvalidArgument, err, "write %s: read the upload", p)
	case max > 0 && n > max:
		return errdefs.New(api.CodePayloadTooLarge, "write %s: more than %d bytes", p, max)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return errdefs.Internal(err, "write %s: spool the upload", p)
	}
	mode := int64(0o644)
	if fi, err := fs.Stat(session.WithoutStep(ctx), p); err == nil && fi.Type == "file" {
		mode = int64(fi.Mode & 0o7777)
	}
	hdr := &tar.Header{Name: path.Base(p), Typeflag: tar.TypeReg, Mode: mode, Size: n,
		Uid: a.UID, Gid: a.GID, Format: tar.FormatPAX, PAXRecords: map[string]string{}}
	for k, v := range meta {
		hdr.PAXRecords["SCHILY.xattr."+metadataXattrPrefix+k] = v
	}
	pr, pw := io.Pipe()
	defer pr.Close() // ends the writer should the extraction stop early
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(hdr)
		if err == nil {
			_, err = io.Copy(tw, spool)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	if err := fs.ExtractTar(ctx, path.Dir(p), pr); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}
