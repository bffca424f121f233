package image

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

const (
	d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	d3 = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
)

// digests returns the layers' digests (or dirs), in order, with their roles.
func layerList(m Manifest) []string {
	var out []string
	for _, l := range m.Layers {
		out = append(out, l.Role+"="+l.Digest+l.Dir)
	}
	return out
}

// TestParseManifestVersions: the three formats written before version 2 read
// as version 2, base first with their roles, and version 2 round-trips.
func TestParseManifestVersions(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"directory image.json (setup.sh)", `{"name":"debian","lower":["top","rootfs"],"created":"2026-01-01T00:00:00Z","description":"d"}`,
			[]string{"base=rootfs", "toolkit=top"}},
		{"layered image.json", `{"name":"b","layers":["` + d1 + `","` + d2 + `"],"blob_store":"dir:/b","sizes":[10,20],"indexes":["` + d3 + `",""],"prefetch_lists":["` + d3 + `"]}`,
			[]string{"base=" + d1, "toolkit=" + d2}},
		{"envstore environment", `{"name":"e","base":{"digest":"` + d1 + `","size":-1},"toolkits":[{"digest":"` + d2 + `","size":5,"name":"tk"}],"workspace":{"digest":"` + d3 + `","size":7},"blob_store":"dir:/b","created":"2026-01-01T00:00:00Z"}`,
			[]string{"base=" + d1, "toolkit=" + d2, "workspace=" + d3}},
	} {
		m, err := ParseManifest([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := layerList(m); !slices.Equal(got, c.want) {
			t.Errorf("%s: layers %v, want %v", c.name, got, c.want)
		}
		// Written back, it is version 2 and reads the same.
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"version": 2`) || strings.Contains(string(b), `"lower":`) || strings.Contains(string(b), `"base":`) {
			t.Errorf("%s: rewritten as %s", c.name, b)
		}
		m2, err := ParseManifest(b)
		if err != nil || !slices.Equal(layerList(m2), c.want) || m2.BlobStore != m.BlobStore || m2.Name != m.Name {
			t.Errorf("%s: round trip %+v, %v", c.name, m2, err)
		}
	}
	m, _ := ParseManifest([]byte(`{"name":"b","layers":["` + d1 + `","` + d2 + `"],"sizes":[10,20],"indexes":["` + d3 + `",""],"prefetch_lists":["` + d3 + `"]}`))
	if l := m.Layers; l[0].Size != 10 || l[1].Size != 20 || l[0].Index != d3 || l[1].Index != "" || l[0].PrefetchList != d3 {
		t.Errorf("version 1 per-layer lists: %+v", l)
	}
	m, _ = ParseManifest([]byte(`{"name":"e","base":{"digest":"` + d1 + `","size":-1,"index":"` + d3 + `","prefetch_list":"` + d2 + `"},"toolkits":[{"digest":"` + d2 + `","size":5,"name":"tk"}]}`))
	if l := m.Layers; l[0].Size != 0 || l[0].Index != d3 || l[0].PrefetchList != d2 || l[1].Name != "tk" || l[1].Size != 5 || m.HasWorkspace() {
		t.Errorf("envstore layer fields: %+v", l)
	}
}

func TestParseManifestErrors(t *testing.T) {
	for _, in := range []string{
		`not json`,
		`{"name":"x"}`,
		`{"name":"x","lower":[]}`,
		`{"version":2,"name":"x","layers":[]}`,
		`{"version":2,"name":"x","layers":[{"digest":"` + d1 + `","dir":"rootfs"}]}`,
		`{"version":2,"name":"x","layers":[{}]}`,
		`{"version":2,"name":"x","layers":["` + d1 + `"]}`,
		`{"name":"x","layers":[{"digest":"` + d1 + `"}]}`,
		`{"version":2,"name":"x","layers":[{"dir":"rootfs"}],"config":{"env":["NOEQUALS"]}}`,
		`{"version":2,"name":"x","layers":[{"dir":"rootfs"}],"config":{"working_dir":"relative"}}`,
		`{"version":2,"name":"x","layers":[{"dir":"rootfs","config":{"env":["=v"]}}]}`,
	} {
		if _, err := ParseManifest([]byte(in)); errdefs.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", in, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"name":"debian","lower":["rootfs"]}`))
	f.Add([]byte(`{"name":"b","layers":["` + d1 + `"],"sizes":[1]}`))
	f.Add([]byte(`{"name":"e","base":{"digest":"` + d1 + `"},"workspace":{"digest":"` + d2 + `"}}`))
	f.Add([]byte(`{"version":2,"name":"x","layers":[{"dir":"rootfs","config":{"env":["A=1"]}}],"config":{"user":"1000"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("error not invalid_argument: %v", err)
			}
			return
		}
		if len(m.Layers) == 0 || m.Layers[0].Role != RoleBase {
			t.Fatalf("parsed without a base layer: %+v", m)
		}
		out, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(out)
		if err != nil || !slices.Equal(layerList(m2), layerList(m)) {
			t.Fatalf("round trip of %s: %+v %v", out, m2, err)
		}
	})
}

// TestResolveManifestV2: a directory image in the current format, with a config
// in image.json, and a layered image.json whose store defaults to the node's.
func TestResolveManifestV2(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app", "rootfs"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", ManifestFile), []byte(`{"version":2,"name":"app","layers":[{"dir":"rootfs"}],
		"config":{"env":["PATH=/app/bin:/bin"],"working_dir":"/app","user":"1000","cmd":["serve"]}}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "lay"), 0o755)
	os.WriteFile(filepath.Join(dir, "lay", ManifestFile), []byte(`{"version":2,"name":"lay","layers":[{"digest":"`+d1+`"},{"digest":"`+d2+`","store":"dir:/own"}]}`), 0o644)
	s := &Store{Dir: dir, BlobStore: "dir:/node"}
	img, err := s.Resolve("app")
	if err != nil {
		t.Fatal(err)
	}
	if c := img.Config; c == nil || c.WorkingDir != "/app" || c.User != "1000" || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Fatalf("config from image.json: %+v", img.Config)
	}
	if v := img.View(nil, false); v.Config == nil || v.Config.WorkingDir != "/app" {
		t.Fatalf("API view lacks the config: %+v", v)
	}
	img, err = s.Resolve("lay")
	if err != nil || !img.Layered() || img.Layers[0].Store != "dir:/node" || img.Layers[1].Store != "dir:/own" || img.Config != nil {
		t.Fatalf("layered image.json: %+v %v", img, err)
	}
	os.WriteFile(filepath.Join(dir, "app", ManifestFile), []byte(`{"version":2,"name":"app","layers":[{"dir":"gone"}]}`), 0o644)
	if _, err := s.Resolve("app"); errdefs.CodeOf(err) != api.CodeInternal {
		t.Fatalf("missing layer dir: %v", err)
	}
}

type fakeMounter struct{ got []Layer }

func (f *fakeMounter) Acquire(_ context.Context, _ string, layers []Layer) ([]string, error) {
	f.got = layers
	var out []string
	for _, l := range layers {
		out = append(out, "/mnt/"+l.Digest[7:11])
	}
	return out, nil
}
func (f *fakeMounter) Release(context.Context, string) error { return nil }
func (f *fakeMounter) Sync(context.Context, []string) error  { return nil }

// TestMountOrder: layers go to the mounter base first; Lower gives the overlay
// order, top-most first.
func TestMountOrder(t *testing.T) {
	fm := &fakeMounter{}
	s := &Store{Layers: fm}
	img := Image{Name: "e", Layers: []Layer{{Role: RoleBase, Digest: d1}, {Role: RoleToolkit, Digest: d2}, {Role: RoleWorkspace, Digest: d3}}}
	if err := s.Mount(t.Context(), &img, "sb"); err != nil {
		t.Fatal(err)
	}
	if len(fm.got) != 3 || fm.got[0].Digest != d1 || fm.got[2].Digest != d3 {
		t.Fatalf("mounter got %+v", fm.got)
	}
	if got := img.Lower(); !slices.Equal(got, []string{"/mnt/3333", "/mnt/2222", "/mnt/1111"}) {
		t.Fatalf("Lower = %v, want workspace, toolkit, base", got)
	}
}
