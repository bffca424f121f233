package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2BSideMissing: without node, or without the e2b npm package, the e2b
// SDK side is not run and says what to install.
func TestE2BSideMissing(t *testing.T) {
	srv := &serverProc{Addr: "http://127.0.0.1:1", Token: "t"}
	sdk := t.TempDir()
	if _, err := e2bSDKSide(context.Background(), srv, CycleOptions{Node: filepath.Join(sdk, "no-node"), E2BSDK: sdk}); err == nil || !strings.Contains(err.Error(), "nodejs") {
		t.Errorf("without node: %v, want the Debian package named", err)
	}
	node := fakeNode(t, "")
	if _, err := e2bSDKSide(context.Background(), srv, CycleOptions{Node: node, E2BSDK: sdk}); err == nil || !strings.Contains(err.Error(), "npm ci") {
		t.Errorf("without the e2b package: %v, want how to install it", err)
	}
}

// TestE2BSideRuns: the side runs one cycle per request in its long-lived
// client, with the server's E2B address and key, from the package's
// directory, and reads the client's timing and errors.
func TestE2BSideRuns(t *testing.T) {
	sdk := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sdk, "node_modules", "e2b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdk, "node_modules", "e2b", "package.json"), []byte(`{"name":"e2b"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	node := fakeNode(t, `n=0
while read -r _; do
  n=$((n+1))
  if [ "$n" = 2 ]; then echo "error Error: sandbox refused"; continue; fi
  [ "$E2B_API_URL" = http://127.0.0.1:9 ] && [ "$E2B_API_KEY" = e2b_tok ] && [ -d node_modules/e2b ] && echo "ok 0.0125" || echo "error wrong environment"
done`)
	s, err := e2bSDKSide(context.Background(), &serverProc{Addr: "http://127.0.0.1:9", Token: "tok"}, CycleOptions{Node: node, E2BSDK: sdk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if d, err := s.run(context.Background()); err != nil || d != 12500*time.Microsecond {
		t.Errorf("first cycle: %v, %v; want 12.5ms", d, err)
	}
	if _, err := s.run(context.Background()); err == nil || !strings.Contains(err.Error(), "sandbox refused") {
		t.Errorf("second cycle: %v, want the client's error", err)
	}
}

// fakeNode is an executable standing in for node: a shell script running body.
func fakeNode(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "node")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
