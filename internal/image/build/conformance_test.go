package build_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// conformanceExclusions are the paths (or fields) whose difference between
// buildah's and dsec's builds is not the Dockerfile's, each with its reason.
var conformanceExclusions = []exclusion{
	{path: "/etc/hosts", reason: "buildah's RUN bind-mounts it and leaves the empty mount point in the image"},
	{path: "/etc/hostname", reason: "buildah's RUN bind-mounts it and leaves the empty mount point in the image"},
	{path: "/etc/resolv.conf", reason: "buildah's RUN bind-mounts it and leaves the empty mount point in the image"},
	{path: "/run", reason: "buildah's RUN creates it for /run/.containerenv and leaves it in the image"},
	{path: "/", reason: "the root directory is in no layer of an image FROM scratch: each runtime makes its own (buildah 0555, dsec 0755)"},
}

// buildahLabels are labels buildah adds to every image it builds.
var buildahLabels = []string{"io.buildah.version"}

// buildahCLI runs Debian's buildah on a storage root of its own (vfs: plain
// directories, nothing mounted), RUN steps chrooted.
type buildahCLI struct {
	root, runroot string
	env           []string
}

func newBuildah(t *testing.T, insecureHost string) *buildahCLI {
	t.Helper()
	dir, err := os.MkdirTemp("", "dsec-buildah-")
	if err != nil {
		t.Fatal(err)
	}
	b := &buildahCLI{root: filepath.Join(dir, "root"), runroot: filepath.Join(dir, "runroot")}
	reg := filepath.Join(dir, "registries.conf")
	conf := fmt.Sprintf("unqualified-search-registries = []\n[[registry]]\nlocation = %q\ninsecure = true\n", insecureHost)
	if err := os.WriteFile(reg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(storage, []byte(fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", b.runroot, b.root)), 0o644); err != nil {
		t.Fatal(err)
	}
	b.env = append(os.Environ(), "CONTAINERS_REGISTRIES_CONF="+reg, "CONTAINERS_STORAGE_CONF="+storage, "BUILDAH_ISOLATION=chroot")
	t.Cleanup(func() {
		// Nothing of buildah's may stay mounted or on disk.
		for _, args := range [][]string{{"umount", "--all"}, {"rm", "--all"}, {"rmi", "--all", "--force"}} {
			if out, err := b.cmd(args...).CombinedOutput(); err != nil {
				t.Logf("buildah %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(mounts, []byte(dir)) {
			t.Errorf("buildah left mounts under %s:\n%s", dir, grepLines(string(mounts), dir))
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove buildah's storage: %v", err)
		}
	})
	return b
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func (b *buildahCLI) cmd(args ...string) *osexec.Cmd {
	c := osexec.Command("buildah", append([]string{"--root", b.root, "--runroot", b.runroot, "--storage-driver", "vfs"}, args...)...)
	c.Env = b.env
	return c
}

func (b *buildahCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := b.cmd(args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("buildah %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// bud builds dir's Dockerfile as image name and returns its merged tree and
// config.
func (b *buildahCLI) bud(t *testing.T, name, dir string, c conformanceCase) (fileTree, api.ImageConfig) {
	t.Helper()
	args := []string{"bud", "--isolation", "chroot", "--tls-verify=false", "--layers=false", "-f", filepath.Join(dir, "Dockerfile"), "-t", name}
	for _, k := range slices.Sorted(mapKeys(c.args)) {
		args = append(args, "--build-arg", k+"="+c.args[k])
	}
	if c.target != "" {
		args = append(args, "--target", c.target)
	}
	b.run(t, append(args, dir)...)
	ctr := b.run(t, "from", "--pull=never", name)
	mnt := b.run(t, "mount", ctr)
	tree, err := walkTree(mnt)
	if err != nil {
		t.Fatal(err)
	}
	b.run(t, "umount", ctr)
	b.run(t, "rm", ctr)
	var insp struct {
		OCIv1 struct {
			Config v1.Config `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(b.run(t, "inspect", "--type", "image", name)), &insp); err != nil {
		t.Fatal(err)
	}
	return tree, ociConfig(insp.OCIv1.Config)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// ociConfig is the part of an OCI config the suite compares, as dsec keeps it.
func ociConfig(c v1.Config) api.ImageConfig {
	out := api.ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels}
	for _, l := range buildahLabels {
		delete(out.Labels, l)
	}
	for p := range c.ExposedPorts {
		out.ExposedPorts = append(out.ExposedPorts, p)
	}
	return out
}

// normConfig makes configs comparable: ports sorted, empty as nil, and Env
// sorted: buildah 1.28 moves a variable an ENV replaces to the end, Docker
// (and dsec) replace it in place; the order means nothing to a process.
func normConfig(c api.ImageConfig) string {
	slices.Sort(c.ExposedPorts)
	c.Env = slices.Sorted(slices.Values(c.Env))
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	for _, s := range []*[]string{&c.Env, &c.Entrypoint, &c.Cmd, &c.ExposedPorts} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	return string(b)
}

// dsecTree builds with dsec's Builder (as `dsec image build` does) and
// returns the built environment's tree as a sandbox sees it: its layers
// mounted by the node's layer service under a read-only overlay.
func dsecTree(t *testing.T, d *node.Daemon, name, dir string, c conformanceCase) (fileTree, api.ImageConfig, api.BuildImageResult) {
	t.Helper()
	// The context goes as `dsec image build` sends it: a tar of the
	// directory (.dockerignore applied), unpacked by the node.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(build.WriteContext(pw, dir, nil)) }()
	res, err := d.Builder.FromTar(context.Background(), t.TempDir(),
		api.BuildImageRequest{Name: name, BuildArgs: c.args, Target: c.target}, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	var steps []string
	for i, s := range res.Steps {
		steps = append(steps, build.StepLine(i+1, s))
	}
	t.Logf("dsec build %s:\n%s", name, strings.Join(steps, "\n"))
	if err != nil {
		t.Fatalf("dsec build %s: %v", name, err)
	}
	tree := mountedTree(t, d, name)
	var cfg api.ImageConfig
	if res.Image.Config != nil {
		cfg = *res.Image.Config
	}
	return tree, cfg, res
}

// mountedTree walks environment name's layers stacked by overlayfs.
func mountedTree(t *testing.T, d *node.Daemon, name string) fileTree {
	t.Helper()
	ctx := context.Background()
	img, err := d.Builder.Resolve(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	holder := "conformance-" + name
	dirs, err := (lazy.Mounter{Client: d.Layers}).Acquire(ctx, holder, img.Layers)
	if err != nil {
		t.Fatalf("mount %s's layers: %v", name, err)
	}
	defer func() { _ = d.Layers.Release(ctx, holder) }()
	slices.Reverse(dirs) // overlay's lowerdir lists the top layer first
	root := dirs[0]
	if len(dirs) > 1 {
		root = t.TempDir()
		if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(dirs, ":")); err != nil {
			t.Fatalf("overlay of %s's layers: %v", name, err)
		}
		defer func() {
			if err := unix.Unmount(root, 0); err != nil {
				t.Errorf("unmount %s: %v", root, err)
			}
		}()
	}
	tree, err := walkTree(root)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// conformanceNode is a node that pulls from reg (plain HTTP allowed).
func conformanceNode(t *testing.T, reg *registrytest.Registry) *node.Daemon {
	t.Helper()
	dir := t.TempDir()
	d, err := node.New(context.Background(), node.Config{DataDir: filepath.Join(dir, "data"), ImagesDir: node.DefaultImagesDir,
		DefaultImage: "busybox", Token: "test", Logger: slog.New(slog.DiscardHandler),
		Registries: registry.Config{Insecure: []string{reg.Host}, Retries: 1, MinBackoff: 1e6}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background(), true) })
	return d
}

// conformanceBase pushes the base image both builders start FROM: busybox
// plus a layer with users, a setuid file, a setgid directory, hard links,
// symlinks (one pointing out of the layer), an xattr, and a file and a
// directory the Dockerfiles remove.
func conformanceBase(t *testing.T, reg *registrytest.Registry) string {
	t.Helper()
	bb, err := (&image.Store{Dir: node.DefaultImagesDir}).Resolve("busybox")
	if err != nil || len(bb.Lower()) != 1 {
		t.Skipf("needs the busybox image in %s (make setup): %v", node.DefaultImagesDir, err)
	}
	out, err := osexec.Command("tar", "-C", bb.Lower()[0], "--numeric-owner", "-cf", "-", ".").Output()
	if err != nil {
		t.Fatalf("tar busybox: %v", err)
	}
	extra := registrytest.Layer(t,
		registrytest.Entry{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		registrytest.Entry{Name: "etc/group", Body: "root:x:0:\nuser:x:1000:\nstaff:x:50:\nnogroup:x:65534:\n"},
		registrytest.Entry{Name: "base/", Type: tar.TypeDir},
		registrytest.Entry{Name: "base/keep.txt", Body: "keep\n"},
		registrytest.Entry{Name: "base/remove-me.txt", Body: "gone\n"},
		registrytest.Entry{Name: "base/dir/", Type: tar.TypeDir},
		registrytest.Entry{Name: "base/dir/a", Body: "a\n"},
		registrytest.Entry{Name: "base/dir/sub/", Type: tar.TypeDir},
		registrytest.Entry{Name: "base/dir/sub/b", Body: "b\n"},
		registrytest.Entry{Name: "base/suid", Body: "#!/bin/sh\n", Mode: 0o4755},
		registrytest.Entry{Name: "base/shared/", Type: tar.TypeDir, Mode: 0o2775},
		registrytest.Entry{Name: "base/hard1", Body: "linked\n"},
		registrytest.Entry{Name: "base/hard2", Type: tar.TypeLink, Linkname: "base/hard1"},
		registrytest.Entry{Name: "base/abs-link", Type: tar.TypeSymlink, Linkname: "/etc/passwd"},
		registrytest.Entry{Name: "base/out-link", Type: tar.TypeSymlink, Linkname: "../../../outside"},
		registrytest.Entry{Name: "base/xattr.txt", Body: "x\n", Xattrs: map[string]string{"user.origin": "base"}},
	)
	cfg := v1.Config{Env: []string{"PATH=/usr/local/bin:/bin", "BASE_VAR=base"}, Cmd: []string{"sh"},
		Labels: map[string]string{"org.example.base": "1"}}
	img := registrytest.Image(t, cfg, registrytest.LayerFromTar(t, out), extra)
	// An OCI manifest names an OCI config (buildah refuses a Docker one there).
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	reg.Push(t, "conformance/base:v1", img)
	return reg.Host + "/conformance/base:v1"
}

// writeArchives writes the archives ADD unpacks into the context: a plain
// tar and a gzip one (directories, owners, modes, a symlink, a hard link),
// and a file named like an archive that is not one (copied as it is).
func writeArchives(t *testing.T, dir string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 0)
	for _, h := range []tar.Header{
		{Name: "pkg/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000, ModTime: mt},
		{Name: "pkg/a", Typeflag: tar.TypeReg, Mode: 0o600, Uid: 1000, Gid: 50, Size: 2, ModTime: mt},
		{Name: "pkg/l", Typeflag: tar.TypeSymlink, Linkname: "a", ModTime: mt},
		{Name: "pkg/h", Typeflag: tar.TypeLink, Linkname: "pkg/a", Mode: 0o600, Uid: 1000, Gid: 50, ModTime: mt}, // as GNU tar writes it
		{Name: "pkg/sub/run", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2, ModTime: mt},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("a\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(buf.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"plain.tar": buf.Bytes(), "bundle.tgz": gz.Bytes(), "fake.tar.gz": []byte("not an archive\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// conformanceCase is one Dockerfile built by both builders.
type conformanceCase struct {
	name       string
	dockerfile string
	args       map[string]string
	target     string
}

// conformanceContext is the build context every case shares.
var conformanceContext = map[string]string{
	"app/hello.txt":    "hello file\n",
	"app/sub/x.txt":    "nested\n",
	"app/debug.log":    "ignored by .dockerignore\n",
	"greet.sh":         "#!/bin/sh\necho \"greetings, $1\"\n",
	"secret.txt":       "s3cret\n",
	"a.conf":           "a=1\n",
	"b.conf":           "b=2\n",
	"notes.txt":        "notes\n",
	"skip/file":        "skipped\n",
	".dockerignore":    "**/*.log\n!app/keep.log\nskip\nDockerfile\n",
	"app/keep.log":     "kept by an exception\n",
	"tools/run.sh":     "#!/bin/sh\nexit 0\n",
	"tools/data/d.bin": "\x00\x01\x02",
}

const conformanceApp = `ARG BASE
FROM ${BASE}
ARG GREETING=hi
ENV APP_HOME=/srv/app MODE=test
ENV BASE_VAR=over PATH=/opt/tools:$PATH FROM_ARG=${GREETING}-x
WORKDIR $APP_HOME
COPY app/ ./
COPY --chown=user:user greet.sh /usr/local/bin/greet
COPY --chown=1000:50 tools /opt/tools
COPY --chmod=0640 secret.txt /secret/
COPY *.conf /etc/app/
ADD notes.txt xattr.txt /srv/notes/
ADD plain.tar /opt/plain
ADD bundle.tgz fake.tar.gz /opt/bundle/
COPY . /ctx/
RUN echo "$GREETING from $(id -un) in $(pwd), MODE=$MODE" > built.txt && mkdir -p /data
RUN ["/bin/sh", "-c", "echo exec form > /data/exec.txt"]
RUN rm /base/remove-me.txt && rm -rf /base/dir && mkdir -p /base/dir && echo new > /base/dir/new.txt
RUN ln /data/exec.txt /data/exec-hard && ln -s ../srv/app/built.txt /data/rel-link && ln -s /nowhere /data/dangling
RUN echo s > /data/suid && chown 1000:1000 /data/suid && chmod 4755 /data/suid && chmod 2775 /data && chmod 1777 /base/shared
SHELL ["/bin/sh", "-e", "-c"]
RUN echo "shell form under SHELL" > /data/shell.txt
USER user
RUN echo "as $(id -u):$(id -g)" > /tmp/user.txt
WORKDIR /home/user/work
EXPOSE 8080 9000/udp
LABEL org.example.task="t1" other=two greeting="$GREETING" org.example.base=replaced
ENTRYPOINT ["/usr/local/bin/greet"]
CMD ["world"]
`

const conformanceMulti = `ARG BASE
FROM ${BASE} AS build
RUN mkdir -p /out/sub && echo built > /out/artifact && ln -s artifact /out/link && chmod 0750 /out && echo deep > /out/sub/f
COPY app/ /src/

FROM scratch AS dist
COPY --from=build /out /dist/
COPY --from=build /src/hello.txt /hello
COPY --from=build /base/suid /base/hard1 /bin/
COPY --from=build /out/*rt* /out/l?nk /src/*/x.txt /dist2/
WORKDIR /dist
ENV DIST=1
CMD ["/dist/artifact"]

FROM ${BASE} AS never
RUN exit 3
`

// conformanceStages ends with a shell-form ENTRYPOINT under the default
// SHELL: buildah 1.28 ignores SHELL for the shell form of CMD and ENTRYPOINT
// (Docker applies it, and so does dsec), so the suite compares only RUN under
// a SHELL (conformanceApp).
const conformanceStages = `ARG BASE
FROM ${BASE} AS build
RUN mkdir -p /out && echo built > /out/artifact && chmod 0700 /out/artifact
FROM build AS second
RUN echo second >> /out/artifact
FROM ${BASE}
COPY --from=second --chown=user:staff /out /opt/out
COPY --from=build /out/artifact /opt/first
COPY --from=build /base/xattr.txt /base/shared /opt/from-base/
COPY --chmod=0750 tools /opt/tools
ENV LEGACY value with spaces
EXPOSE 7000-7002 53/udp
RUN rm -rf /base/dir /base/keep.txt && mkdir /base/keep.txt && mkfifo -m 0640 /base/fifo && rm /base/hard1
USER 1000:50
COPY greet.sh /home/user/bin/
COPY app/hello-link /home/user/linked
WORKDIR sub
ENTRYPOINT exec greet "$HOME"
`

// TestDockerfileConformance builds a set of Dockerfiles (every instruction
// dsec supports, multi-stage with --target and COPY --from, FROM scratch,
// whiteouts and opaque directories, hard links, symlinks, setuid files,
// xattrs, .dockerignore, --chown, --chmod, wildcards, --build-arg) with dsec
// and with Debian's buildah from the same context FROM the same image in a
// loopback registry, and compares the resulting trees (paths, types, modes,
// owners, link targets, contents, hard links, xattrs) and image configs. A
// rebuild with one line changed redoes only the layer steps from that line.
func TestDockerfileConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := osexec.LookPath("buildah"); err != nil {
		t.Skip("needs buildah (apt-get install buildah; scripts/setup.sh installs it)")
	}
	reg := registrytest.Start(t, "", "")
	base := conformanceBase(t, reg)
	d := conformanceNode(t, reg)
	bh := newBuildah(t, reg.Host)

	dir := t.TempDir()
	writeFiles(t, dir, conformanceContext)
	if err := unix.Lsetxattr(filepath.Join(dir, "notes.txt"), "user.note", []byte("context"), 0); err != nil {
		t.Fatalf("xattr on a context file: %v", err)
	}
	if err := os.Symlink("hello.txt", filepath.Join(dir, "app/hello-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "xattr.txt"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeArchives(t, dir)

	cases := []conformanceCase{
		{name: "app", dockerfile: conformanceApp, args: map[string]string{"BASE": base, "GREETING": "hello"}},
		{name: "multi", dockerfile: conformanceMulti, args: map[string]string{"BASE": base}, target: "dist"},
		{name: "stages", dockerfile: conformanceStages, args: map[string]string{"BASE": base}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(c.dockerfile), 0o644); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			want, wantCfg := bh.bud(t, "conformance-"+c.name, dir, c)
			t1 := time.Now()
			got, gotCfg, _ := dsecTree(t, d, "conformance-"+c.name, dir, c)
			t.Logf("buildah %s, dsec %s; %d paths", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), len(want))
			if diffs := compareTrees(want, got, conformanceExclusions); len(diffs) > 0 {
				t.Errorf("%d differences between buildah's tree and dsec's:\n%s", len(diffs), strings.Join(diffs, "\n"))
			}
			if w, g := normConfig(wantCfg), normConfig(gotCfg); w != g {
				t.Errorf("image config: buildah's\n%s\ndsec's\n%s", w, g)
			}
		})
	}

	t.Run("cache", func(t *testing.T) {
		changed := strings.Replace(conformanceApp, "echo exec form", "echo exec form, changed", 1)
		line := 1 + strings.Count(changed[:strings.Index(changed, "changed")], "\n")
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
		c := cases[0]
		_, _, res := dsecTree(t, d, "conformance-app2", dir, c)
		var hits, misses int
		for _, s := range res.Steps {
			if s.Layer == "" {
				continue
			}
			if s.Cached {
				hits++
			} else {
				misses++
			}
			if s.Cached != (s.Line < line) {
				t.Errorf("line %d (%s): cached %v; only the layer steps before line %d should be", s.Line, s.Instruction, s.Cached, line)
			}
		}
		if hits == 0 || misses == 0 || res.CacheHits != hits {
			t.Errorf("%d hits, %d misses (result says %d hits)", hits, misses, res.CacheHits)
		}
		t.Logf("rebuild with line %d changed: %d layer steps from the cache, %d redone", line, hits, misses)
		want, wantCfg := bh.bud(t, "conformance-app2", dir, c)
		got := mountedTree(t, d, "conformance-app2")
		if diffs := compareTrees(want, got, conformanceExclusions); len(diffs) > 0 {
			t.Errorf("%d differences after the cached rebuild:\n%s", len(diffs), strings.Join(diffs, "\n"))
		}
		img, err := d.Builder.Resolve(context.Background(), "conformance-app2")
		if err != nil {
			t.Fatal(err)
		}
		if w, g := normConfig(wantCfg), normConfig(*img.Config.API()); w != g {
			t.Errorf("image config after the rebuild: buildah's\n%s\ndsec's\n%s", w, g)
		}
	})
}
