package fsops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

const secret = "top secret"

// sandbox is a test sandbox: root is its "/", outside a sibling directory holding a
// secret file that no operation may read, change or add to.
type sandbox struct {
	fs      *FS
	base    string
	root    string
	outside string
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	base := t.TempDir()
	s := &sandbox{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.root, s.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.outside, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(s.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.fs = New(os.NewFile(uintptr(fd), s.root))
	t.Cleanup(func() { s.fs.Close() })
	return s
}

// host returns the host path of sandbox path p (tests only).
func (s *sandbox) host(p string) string { return filepath.Join(s.root, p) }

// checkOutside fails unless outside still holds exactly the secret and base holds
// only root and outside.
func (s *sandbox) checkOutside(t testing.TB) {
	t.Helper()
	ents, err := os.ReadDir(s.outside)
	if err != nil {
		t.Fatalf("outside: %v", err)
	}
	if len(ents) != 1 || ents[0].Name() != "secret" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("outside was changed: %v", names)
	}
	b, err := os.ReadFile(filepath.Join(s.outside, "secret"))
	if err != nil || string(b) != secret {
		t.Fatalf("secret changed: %q %v", b, err)
	}
	ents, err = os.ReadDir(s.base)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Fatalf("base dir holds %d entries", len(ents))
	}
}

func (s *sandbox) write(t testing.TB, p, content string) {
	t.Helper()
	if _, err := s.fs.WriteFile(p, 0, strings.NewReader(content), 0); err != nil {
		t.Fatalf("WriteFile %s: %v", p, err)
	}
}

func (s *sandbox) read(t testing.TB, p string) (string, error) {
	t.Helper()
	rc, _, err := s.fs.Open(p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := rc.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String(), nil
}

func wantCode(t testing.TB, err error, code api.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got := errdefs.CodeOf(err); got != code {
		t.Fatalf("got %s (%v), want %s", got, err, code)
	}
}

func errCode(err error) api.Code { return errdefs.CodeOf(err) }
