package layer_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Fuzz targets for what a layer build takes from outside: tars, docker
// archives and OCI layouts (their manifests and the image selection). Every
// input either builds a layer that parses as EROFS or is refused with
// invalid_argument or not_found; nothing panics, nothing else goes wrong.

func tarBytes(t testing.TB, hs []tar.Header, data map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		h := h
		if c, ok := data[h.Name]; ok {
			h.Size = int64(len(c))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if c, ok := data[h.Name]; ok {
			_, _ = tw.Write([]byte(c))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// buildChecked builds src and checks the outcome the way the fuzz targets want.
func buildChecked(t *testing.T, src layer.Source) {
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var kept string
	_, err = layer.Build(context.Background(), src, store, layer.Options{TempDir: t.TempDir(), Keep: func(p string) { kept = p }})
	if err != nil {
		if c := errdefs.CodeOf(err); c != api.CodeInvalidArgument && c != api.CodeNotFound {
			t.Fatalf("build %s: error of code %s: %v", src, c, err)
		}
		return
	}
	f, err := os.Open(kept)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := layer.Inspect(f); err != nil {
		t.Fatalf("build %s succeeded but the layer does not parse: %v", src, err)
	}
}

func seedTar(t testing.TB) []byte {
	now := time.Unix(1700000000, 0)
	return tarBytes(t, []tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "etc/f", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now, Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.x": "1"}},
		{Name: "etc/l", Typeflag: tar.TypeLink, Linkname: "etc/f", ModTime: now},
		{Name: "etc/s", Typeflag: tar.TypeSymlink, Linkname: "../../../../etc/passwd", ModTime: now},
		{Name: "dev/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, ModTime: now},
		{Name: "etc/.wh.gone", Typeflag: tar.TypeReg, ModTime: now},
	}, map[string]string{"etc/f": "hello"})
}

func FuzzBuildFromTar(f *testing.F) {
	good := seedTar(f)
	f.Add(good)
	f.Add(gz(good))
	f.Add(tarBytes(f, []tar.Header{{Name: "../escape", Typeflag: tar.TypeReg}}, nil))
	f.Add(tarBytes(f, []tar.Header{{Name: "a", Typeflag: tar.TypeLink, Linkname: "missing"}}, nil))
	f.Add(tarBytes(f, []tar.Header{{Name: "a/", Typeflag: tar.TypeDir}, {Name: "a", Typeflag: tar.TypeReg}, {Name: "a/b", Typeflag: tar.TypeReg}}, nil))
	f.Add([]byte{})
	f.Add(good[:700])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "in.tar")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		buildChecked(t, layer.Source{Kind: "tar", Arg: p})
	})
}

// FuzzDockerArchive fuzzes a `docker save` tar's manifest.json and config and
// the tag that selects the image.
func FuzzDockerArchive(f *testing.F) {
	lt := seedTar(f)
	f.Add([]byte(`[{"Config":"config.json","RepoTags":["x/y:1"],"Layers":["layer.tar"]}]`),
		[]byte(`{"architecture":"amd64","os":"linux","config":{"Env":["A=1"]},"rootfs":{"type":"layers","diff_ids":[]}}`), "")
	f.Add([]byte(`[{"Config":"config.json","RepoTags":["x/y:1"],"Layers":["layer.tar"]}]`), []byte(`{}`), "x/y:1")
	f.Add([]byte(`[{"Config":"config.json","RepoTags":["x/y:1"],"Layers":["../../etc/passwd"]}]`), []byte(`{}`), "x/y:2")
	f.Add([]byte(`[]`), []byte(`{}`), "")
	f.Add([]byte(`[{},{}]`), []byte(`null`), "")
	f.Fuzz(func(t *testing.T, manifest, config []byte, tag string) {
		if len(tag) > 256 {
			return
		}
		now := time.Unix(1700000000, 0)
		archive := tarBytes(t, []tar.Header{
			{Name: "manifest.json", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
			{Name: "config.json", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
			{Name: "layer.tar", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		}, map[string]string{"manifest.json": string(manifest), "config.json": string(config), "layer.tar": string(lt)})
		p := filepath.Join(t.TempDir(), "img.tar")
		if err := os.WriteFile(p, archive, 0o644); err != nil {
			t.Fatal(err)
		}
		arg := p
		if tag != "" {
			arg += "@" + tag
		}
		buildChecked(t, layer.Source{Kind: "docker-archive", Arg: arg})
	})
}

// FuzzOCILayoutSelect fuzzes an OCI layout's index.json (the blobs are those of
// a real one-image layout) and the selector after '@'.
func FuzzOCILayoutSelect(f *testing.F) {
	img := seedImage(f)
	tmpl := filepath.Join(f.TempDir(), "layout")
	lp, err := layout.Write(tmpl, empty.Index)
	if err != nil {
		f.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		f.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(tmpl, "index.json"))
	if err != nil {
		f.Fatal(err)
	}
	dg, _ := img.Digest()
	f.Add(index, "")
	f.Add(index, dg.String())
	f.Add(index, "sha256:0000")
	f.Add([]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"`+dg.String()+`","size":1}]}`), "")
	f.Add([]byte(`{"schemaVersion":2,"manifests":[]}`), "")
	f.Add([]byte(`{"manifests":[{"digest":"sha256:../../x","size":-1}]}`), "latest")
	f.Fuzz(func(t *testing.T, idx []byte, sel string) {
		if len(sel) > 256 {
			return
		}
		dir := filepath.Join(t.TempDir(), "layout")
		if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
			t.Fatal(err)
		}
		arg := dir
		if sel != "" {
			arg += "@" + sel
		}
		buildChecked(t, layer.Source{Kind: "oci-layout", Arg: arg})
	})
}

// seedImage is a one-layer image of seedTar.
func seedImage(t testing.TB) v1.Image {
	lpath := filepath.Join(t.TempDir(), "l.tar")
	if err := os.WriteFile(lpath, seedTar(t), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromFile(lpath)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
