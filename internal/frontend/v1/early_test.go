package v1_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// An error answered before the request body was read reaches a client that
// keeps its streamed body open until it has the answer (the Go SDK and the CLI
// do, for exec/stream and uploads from a pipe): net/http would otherwise read
// the body to its end before sending the answer, and both sides would wait.
func TestEarlyErrorWithOpenBody(t *testing.T) {
	e := newEnv(t, v1.Options{})
	for name, path := range map[string]string{
		"exec stream, no sandbox": "/v1/sandboxes/nope/exec/stream",
		"upload, no sandbox":      "/v1/sandboxes/nope/files?path=/f",
	} {
		t.Run(name, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			go func() { _, _ = io.WriteString(pw, `{"cmd":["cat"]}`+"\n") }() // then nothing, body open
			method := http.MethodPost
			if name[:6] == "upload" {
				method = http.MethodPut
			}
			req, _ := http.NewRequest(method, e.srv.URL+path, pr)
			req.Header.Set("Authorization", "Bearer "+token)
			type answer struct {
				resp *http.Response
				err  error
			}
			ch := make(chan answer, 1)
			go func() {
				resp, err := e.srv.Client().Do(req)
				ch <- answer{resp, err}
			}()
			select {
			case a := <-ch:
				if a.err != nil {
					t.Fatal(a.err)
				}
				b, _ := io.ReadAll(a.resp.Body)
				a.resp.Body.Close()
				wantError(t, a.resp, b, http.StatusNotFound, api.CodeNotFound)
			case <-time.After(5 * time.Second):
				t.Fatal("no answer while the request body stays open")
			}
		})
	}
}
