package build_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	erofs "github.com/erofs/go-erofs"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/pkg/api"
)

// scratchBuilder is a builder with a blob store and no sandboxes at all: a
// build FROM scratch needs none (a nil Sandboxes would panic if it tried).
func scratchBuilder(t *testing.T) (*build.Builder, blob.Store) {
	t.Helper()
	blobs, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	envs, err := envstore.Open(t.TempDir(), blobs)
	if err != nil {
		t.Fatal(err)
	}
	return &build.Builder{Envs: envs, TempDir: t.TempDir(),
		Resolve: func(context.Context, string) (image.Image, error) {
			return image.Image{}, errdefs.NotFound("no images here")
		},
	}, blobs
}

// layerFS opens the built image's one layer.
func layerFS(t *testing.T, blobs blob.Store, img api.Image) fs.FS {
	t.Helper()
	if len(img.Layers) != 1 {
		t.Fatalf("%d layers, want the scratch stage's one: %+v", len(img.Layers), img.Layers)
	}
	rc, err := blobs.Open(context.Background(), img.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := erofs.Open(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// tree lists every path of fsys with its type and mode, and file contents.
func tree(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			line += " " + strings.TrimSpace(string(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const scratchDockerfile = `FROM scratch AS files
COPY hello.txt /etc/hello.txt
WORKDIR /app
COPY --chmod=0700 run.sh ./run
COPY sub/ /data/
CMD ["/app/run"]

FROM scratch
COPY --from=files /etc/hello.txt /hello
COPY --from=files /data /data
LABEL task=t1
ENTRYPOINT ["/hello"]
`

// TestBuildFromScratch: FROM scratch with COPY (--chmod, WORKDIR), a second
// stage FROM scratch with COPY --from the first: each result is one layer
// holding exactly the files copied, with the config; a rebuild is all cache
// hits with the same layer; RUN in a scratch stage (named in the error with its
// line: it has no shell) and a scratch stage with
// no files are refused with invalid_argument.
func TestBuildFromScratch(t *testing.T) {
	b, blobs := scratchBuilder(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hello.txt": "hello\n", "run.sh": "#!/bin/run\n", "sub/dir/a.txt": "a\n"})
	do := func(target, dockerfile string) (api.BuildImageResult, error) {
		return b.Build(context.Background(), build.Request{BuildImageRequest: api.BuildImageRequest{Name: "sc", Target: target},
			DockerfileText: []byte(dockerfile), ContextDir: dir})
	}
	res, err := do("files", scratchDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"app drwxr-xr-x", "app/run -rwx------ #!/bin/run", "data drwxr-xr-x", "data/dir drwxr-xr-x",
		"data/dir/a.txt -rw-r--r-- a", "etc drwxr-xr-x", "etc/hello.txt -rw-r--r-- hello"}
	if got := tree(t, layerFS(t, blobs, res.Image)); !slices.Equal(got, want) {
		t.Errorf("stage files:\n got %q\nwant %q", got, want)
	}
	if c := res.Image.Config; c == nil || !slices.Equal(c.Cmd, []string{"/app/run"}) || c.WorkingDir != "/app" {
		t.Errorf("config %+v", res.Image.Config)
	}

	res, err = do("", scratchDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"data drwxr-xr-x", "data/dir drwxr-xr-x", "data/dir/a.txt -rw-r--r-- a", "hello -rw-r--r-- hello"}
	if got := tree(t, layerFS(t, blobs, res.Image)); !slices.Equal(got, want) {
		t.Errorf("final stage:\n got %q\nwant %q", got, want)
	}
	if c := res.Image.Config; c == nil || !slices.Equal(c.Entrypoint, []string{"/hello"}) || c.Labels["task"] != "t1" || c.Cmd != nil {
		t.Errorf("config %+v", res.Image.Config)
	}
	first := res.Image.Layers[0].Digest
	again, err := do("", scratchDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if again.LayerSteps == 0 || again.CacheHits != again.LayerSteps || again.Image.Layers[0].Digest != first {
		t.Errorf("rebuild: %d of %d layer steps cached, layer %s (first %s)", again.CacheHits, again.LayerSteps,
			again.Image.Layers[0].Digest, first)
	}
	// A changed file redoes the steps that read it.
	writeFiles(t, dir, map[string]string{"sub/dir/a.txt": "changed\n"})
	changed, err := do("", scratchDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if changed.CacheHits == changed.LayerSteps || !slices.Contains(tree(t, layerFS(t, blobs, changed.Image)), "data/dir/a.txt -rw-r--r-- changed") {
		t.Errorf("after a change: %d of %d cached", changed.CacheHits, changed.LayerSteps)
	}

	for dockerfile, msg := range map[string]string{
		"FROM scratch\nCOPY hello.txt /\nRUN true\n":                                           "line 3: RUN in stage 0, which is FROM scratch: it has no shell",
		"FROM scratch AS files\nCOPY hello.txt /\nFROM files AS again\nRUN [\"/hello.txt\"]\n": `line 4: RUN in stage 1 "again", which is FROM scratch`,
		"FROM scratch\nCMD [\"/x\"]\n":                                                         "has no files",
	} {
		_, err := do("", dockerfile)
		if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want invalid_argument saying %q", dockerfile, err, msg)
		}
	}
}

// TestBuildScratchStagesOnNode (root, the debian image): a stage FROM
// scratch takes files COPY --from a stage that RAN in a sandbox, and a stage
// on debian takes the scratch stage's files COPY --from it; a sandbox of the
// result sees them, and the build leaves no sandbox behind.
func TestBuildScratchStagesOnNode(t *testing.T) {
	d := startNode(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"note.txt": "from the context\n"})
	dockerfile := `FROM debian AS compile
RUN mkdir -p /out && echo compiled > /out/prog && chmod 755 /out/prog
FROM scratch AS dist
COPY --from=compile /out/prog /bin/prog
COPY note.txt /
FROM debian
COPY --from=dist / /dist/
`
	res, err := buildIn(t, d, "scratch-multi", dir, dockerfile, nil)
	if err != nil {
		t.Fatal(err)
	}
	noSandboxes(t, d)
	sb, err := d.Manager.Create(context.Background(), api.CreateSandboxRequest{Image: "scratch-multi"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Manager.Delete(context.Background(), sb.ID)
	got := exec(t, d, sb.ID, "cd /dist && find . | sort && cat bin/prog note.txt && stat -c '%a %U' bin/prog")
	if want := ".\n./bin\n./bin/prog\n./note.txt\ncompiled\nfrom the context\n755 root"; got != want {
		t.Errorf("the scratch stage's files in the result:\n%s\nwant\n%s", got, want)
	}
	t.Logf("%d steps, %d layer steps", len(res.Steps), res.LayerSteps)
}
