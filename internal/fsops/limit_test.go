package fsops

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestHTTPBodyLimit checks that a body cut by http.MaxBytesReader (as the server
// wraps uploads) is payload_too_large and leaves the old content.
func TestHTTPBodyLimit(t *testing.T) {
	s := newSandbox(t)
	s.write(t, "/f", "old")
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader("0123456789")), 5)
	_, err := s.fs.WriteFile("/f", 0, body, 5)
	wantCode(t, err, api.CodePayloadTooLarge)
	if got, _ := s.read(t, "/f"); got != "old" {
		t.Fatalf("content = %q", got)
	}
	data := buildTar(t, tarEntry{name: "big", body: strings.Repeat("x", 4096)})
	body = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(data)), 1024)
	wantCode(t, s.fs.ExtractTar("/dst", body), api.CodePayloadTooLarge)
	body = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(gz(data))), 20)
	wantCode(t, s.fs.ExtractTar("/dst", body), api.CodePayloadTooLarge)
}
