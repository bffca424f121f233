package fsops

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// sparseFile makes a file of size bytes whose only data is mark at each of
// offs.
func sparseFile(t *testing.T, p string, size int64, mark []byte, offs ...int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		if _, err := f.WriteAt(mark, o); err != nil {
			t.Fatal(err)
		}
	}
}

func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestCopySparse: a 1 GiB file with two 4 KiB marks is copied with its holes:
// the copy has the same size and bytes and allocates about what the source does.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	mark := bytes.Repeat([]byte("m"), 4096)
	const size = 1 << 30
	sparseFile(t, src, size, mark, 0, 512<<20)
	if a := allocated(t, src); a > 1<<20 {
		t.Skipf("the test dir's file system does not keep holes (%d bytes allocated)", a)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	n, err := CopySparse(out, in, size)
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n > 1<<20 {
		t.Errorf("copied %d data bytes of a file with 8 KiB of data", n)
	}
	fi, _ := os.Stat(dst)
	if fi.Size() != size {
		t.Errorf("copy size %d, want %d", fi.Size(), size)
	}
	if a := allocated(t, dst); a > 1<<20 {
		t.Errorf("the copy allocates %d bytes: its holes were filled", a)
	}
	f, _ := os.Open(dst)
	defer f.Close()
	for _, o := range []int64{0, 512 << 20} {
		got := make([]byte, len(mark))
		if _, err := f.ReadAt(got, o); err != nil || !bytes.Equal(got, mark) {
			t.Errorf("data at %d not copied: %v", o, err)
		}
	}
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, 100<<20); err != nil || !bytes.Equal(got, make([]byte, 4096)) {
		t.Errorf("a hole reads other than zeros: %v", err)
	}
}

// TestTarHoleBudget: a 256 MiB sparse file in a sandbox whose disk limit is 64 MiB
// is refused with resource_exhausted before any of it is streamed; a dense file
// and a small sparse one within the budget go out whole.
func TestTarHoleBudget(t *testing.T) {
	s := newSandbox(t)
	if err := os.WriteFile(filepath.Join(s.root, "dense"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	sparseFile(t, filepath.Join(s.root, "small"), 1<<20, []byte("x"), 0)
	s.fs.SetHoleBudget(64 << 20)
	var buf bytes.Buffer
	if err := s.fs.WriteTar("/", &buf); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	names := map[string]int64{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = h.Size
	}
	if names["dense"] != 5 || names["small"] != 1<<20 {
		t.Errorf("entries %v", names)
	}

	sparseFile(t, filepath.Join(s.root, "huge"), 256<<20, []byte("x"), 0)
	buf.Reset()
	w := &countWriter{w: &buf}
	err := s.fs.WriteTar("/", w)
	if errdefs.CodeOf(err) != api.CodeResourceExhausted {
		t.Fatalf("tar of a 256 MiB sparse file under a 64 MiB budget: %v, want resource_exhausted", err)
	}
	if w.n > 4<<20 {
		t.Errorf("%d bytes streamed before the refusal", w.n)
	}
	var ae *errdefs.Error
	if !errors.As(err, &ae) || !bytes.Contains([]byte(err.Error()), []byte("/huge")) {
		t.Errorf("the error does not name the file: %v", err)
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
