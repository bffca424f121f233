package blob

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		spec, kind, path, bucket, endpoint string
		ok                                 bool
	}{
		{"dir:/var/lib/dsec/blobs", "dir", "/var/lib/dsec/blobs", "", "", true},
		{"posix:/mnt/3fs", "posix", "/mnt/3fs", "", "", true},
		{"s3://layers?endpoint=127.0.0.1:9000&insecure=1&prefix=p/", "s3", "", "layers", "127.0.0.1:9000", true},
		{"dir:", "", "", "", "", false},
		{"dir:relative", "", "", "", "", false},
		{"s3://bucket", "", "", "", "", false},
		{"s3://?endpoint=x", "", "", "", "", false},
		{"ftp://x", "", "", "", "", false},
		{"", "", "", "", "", false},
	} {
		kind, path, s3, err := ParseSpec(c.spec)
		if (err == nil) != c.ok {
			t.Errorf("%q: err = %v, want ok=%v", c.spec, err, c.ok)
			continue
		}
		if !c.ok {
			if errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Errorf("%q: code %q, want invalid_argument", c.spec, errdefs.CodeOf(err))
			}
			continue
		}
		if kind != c.kind || path != c.path || s3.Bucket != c.bucket || s3.Endpoint != c.endpoint {
			t.Errorf("%q: got %q %q %+v", c.spec, kind, path, s3)
		}
	}
}

func TestOpenDirMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	if _, err := Open("dir:"+dir, false); errdefs.CodeOf(err) != api.CodeUnavailable {
		t.Fatalf("missing dir without create: %v (code %q), want unavailable", err, errdefs.CodeOf(err))
	}
	s, err := Open("dir:"+dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), FromBytes([]byte("x")), strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("dir:"+dir, false); err != nil {
		t.Fatalf("existing dir: %v", err)
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"dir:/x", "posix:/y", "s3://b?endpoint=h:1", "s3://%zz", "dir:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		kind, path, _, err := ParseSpec(spec)
		if err != nil {
			return
		}
		if kind != "dir" && kind != "posix" && kind != "s3" {
			t.Fatalf("kind %q", kind)
		}
		if kind != "s3" && (path == "" || path[0] != '/') {
			t.Fatalf("path %q", path)
		}
	})
}
