package blob_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/blob/blobtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// startS3 serves an in-memory S3 over real HTTP on 127.0.0.1.
func startS3(t *testing.T) (endpoint string, backend *s3mem.Backend) {
	backend = s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return srv.URL, backend
}

var bucketN atomic.Int64

func TestS3Conformance(t *testing.T) {
	ep, be := startS3(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		bucket := fmt.Sprintf("bucket-%d", bucketN.Add(1))
		if err := be.CreateBucket(bucket); err != nil {
			t.Fatal(err)
		}
		s, err := blob.NewS3(blob.S3Config{Endpoint: ep, Bucket: bucket, AccessKey: "k", SecretKey: "s", Region: "us-east-1", Prefix: "dsec/layers", TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestS3Unreachable(t *testing.T) {
	// A port nothing listens on.
	srv := httptest.NewServer(nil)
	ep := srv.URL
	srv.Close()
	s, err := blob.NewS3(blob.S3Config{Endpoint: ep, Bucket: "bucket", AccessKey: "k", SecretKey: "s", Region: "us-east-1", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	d := blob.FromBytes([]byte("x"))
	for name, f := range map[string]func() error{
		"stat": func() error { _, err := s.Stat(ctx, d); return err },
		"put":  func() error { return s.Put(ctx, d, bytes.NewReader([]byte("x")), 1) },
		"read": func() error { _, err := s.ReadAt(ctx, d, make([]byte, 1), 0); return err },
		"list": func() error { _, err := s.List(ctx); return err },
	} {
		err := f()
		ae := errdefs.ToAPI(err)
		if err == nil || ae.Code != api.CodeUnavailable || !ae.Infrastructure || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%s: err=%v code=%s infra=%v", name, err, ae.Code, ae.Infrastructure)
		}
		t.Logf("%s: %v", name, err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("unreachable store took %v to fail", time.Since(start))
	}
}

func TestS3MissingBucket(t *testing.T) {
	ep, _ := startS3(t)
	s, _ := blob.NewS3(blob.S3Config{Endpoint: ep, Bucket: "nope", AccessKey: "k", SecretKey: "s", Region: "us-east-1"})
	_, err := s.Stat(context.Background(), blob.FromBytes([]byte("x")))
	if ae := errdefs.ToAPI(err); err == nil || !ae.Infrastructure || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	t.Logf("missing bucket: %v (%s)", err, errdefs.CodeOf(err))
}
