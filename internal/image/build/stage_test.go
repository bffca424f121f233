package build

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestRenameTar: a stage's tar of /out (entries out/...) becomes the
// destination's entries, owned as COPY says, hard links renamed alike.
func TestRenameTar(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []tar.Header{
		{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000},
		{Name: "out/bin/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000},
		{Name: "out/bin/tool", Typeflag: tar.TypeReg, Mode: 0o755, Size: 4, Uid: 1000},
		{Name: "out/bin/same", Typeflag: tar.TypeLink, Linkname: "out/bin/tool"},
		{Name: "out/l", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("tool"))
		}
	}
	tw.Close()
	for _, c := range []struct {
		base, prefix string
		want         []string
	}{
		{"out", "", []string{"bin/ 0", "bin/tool 0", "bin/same 0 bin/tool", "l 0 /etc"}},
		{"out", "opt", []string{"opt/ 0", "opt/bin/ 0", "opt/bin/tool 0", "opt/bin/same 0 opt/bin/tool", "opt/l 0 /etc"}},
	} {
		var out bytes.Buffer
		if err := renameTar(bytes.NewReader(in.Bytes()), &out, c.base, c.prefix, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		var got []string
		tr := tar.NewReader(&out)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			s := h.Name + " " + string(rune('0'+h.Uid))
			if h.Linkname != "" {
				s += " " + h.Linkname
			}
			got = append(got, s)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("base %q prefix %q: %q, want %q", c.base, c.prefix, got, c.want)
		}
	}
}
