// Package initbin embeds dsec-init, the static C program that runs as PID 1 of
// every container sandbox (source in csrc/init), and installs it on disk so it
// can be executed. Build the binary first with `sh internal/backend/initbin/build.sh`
// (or `go generate ./internal/backend/initbin`); it is not checked in.
package initbin

//go:generate sh build.sh

import (
	"crypto/sha256"
	_ "embed" // for the embedded init binary
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed dsec-init
var binary []byte

// Bytes returns the embedded dsec-init binary. Callers must not modify it.
func Bytes() []byte { return binary }

// NamePrefix begins every name Install gives (the binary of any build).
const NamePrefix = "dsec-init-"

// Name returns the content-addressed file name Install uses:
// dsec-init-<first 12 hex digits of the sha256>.
func Name() string {
	sum := sha256.Sum256(binary)
	return NamePrefix + hex.EncodeToString(sum[:])[:12]
}

// Install writes the binary into dir (created if missing) under Name, mode
// 0755, via a temporary file and rename, and returns its path. An existing
// file of that name is trusted and left alone.
func Install(dir string) (string, error) {
	path := filepath.Join(dir, Name())
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("initbin: stat %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("initbin: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".dsec-init-*")
	if err != nil {
		return "", fmt.Errorf("initbin: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(binary); err != nil {
		tmp.Close()
		return "", fmt.Errorf("initbin: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("initbin: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("initbin: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("initbin: install %s: %w", path, err)
	}
	return path, nil
}
