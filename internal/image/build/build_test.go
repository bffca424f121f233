package build_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func TestMain(m *testing.M) {
	lazy.MaybeMain() // the nodes these tests open start this binary as layerd
	if dir := os.Getenv(crashEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	os.Exit(m.Run())
}

// startNode starts a node (container sandboxes, the debian directory image)
// in a scratch data dir.
func startNode(t *testing.T) *node.Daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(node.DefaultImagesDir, "debian", "image.json")); err != nil {
		t.Skipf("needs the debian image in %s (make setup): %v", node.DefaultImagesDir, err)
	}
	d, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), ImagesDir: node.DefaultImagesDir,
		DefaultImage: "debian", Token: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background(), true) })
	return d
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func buildIn(t *testing.T, d *node.Daemon, name, dir, dockerfile string, args map[string]string) (api.BuildImageResult, error) {
	t.Helper()
	var progress bytes.Buffer
	res, err := d.Builder.Build(context.Background(), build.Request{
		BuildImageRequest: api.BuildImageRequest{Name: name, BuildArgs: args},
		DockerfileText:    []byte(dockerfile), ContextDir: dir, Progress: &progress})
	t.Logf("build %s:\n%s", name, progress.String())
	return res, err
}

// noSandboxes fails if a build left a sandbox behind.
func noSandboxes(t *testing.T, d *node.Daemon) {
	t.Helper()
	sbs, err := d.Manager.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 {
		t.Fatalf("%d sandboxes left after the build: %+v", len(sbs), sbs)
	}
}

func exec(t *testing.T, d *node.Daemon, id, script string) string {
	t.Helper()
	r, err := d.Manager.Exec(context.Background(), id, api.ExecRequest{Shell: script, TimeoutMs: 30000})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, r.ExitCode, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(r.Stdout)
}

const appDockerfile = `# a small app image
ARG BASE=debian
FROM ${BASE}
ARG GREETING=hi
ENV APP_HOME=/srv/app
WORKDIR $APP_HOME
COPY app/ ./
COPY --chown=user:user greet.sh /usr/local/bin/greet
RUN echo "$GREETING from $(id -un)" > built.txt && mkdir -p /data
USER user
RUN ["/bin/sh", "-c", "echo as $(id -un) in $(pwd) > /home/user/who.txt"]
WORKDIR /home/user/work
EXPOSE 8080
LABEL org.example.task="t1"
HEALTHCHECK CMD true
CMD ["greet", "world"]
`

// TestBuildDockerfile builds a Dockerfile FROM the debian image with ARG,
// ENV, WORKDIR, COPY (--chown), RUN (shell and exec form), USER, EXPOSE,
// LABEL, CMD; a sandbox of the result has the files, env, cwd and user; a
// rebuild takes every layer step from the cache, a changed context file
// redoes only the steps from its COPY on; and the build runs through /v1.
func TestBuildDockerfile(t *testing.T) {
	d := startNode(t)
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"app/hello.txt": "hello file\n",
		"app/sub/x.txt": "nested\n",
		"greet.sh":      "#!/bin/sh\necho \"greetings, $1\"\n",
	})

	t0 := time.Now()
	res, err := buildIn(t, d, "app", dir, appDockerfile, map[string]string{"GREETING": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(t0)
	noSandboxes(t, d)
	// COPY, COPY, RUN, RUN and the last WORKDIR's directory.
	if res.LayerSteps != 5 || res.CacheHits != 0 {
		t.Fatalf("cold build: %d layer steps, %d cache hits; want 5, 0", res.LayerSteps, res.CacheHits)
	}
	var warned bool
	for _, st := range res.Steps {
		warned = warned || strings.HasPrefix(st.Instruction, "HEALTHCHECK") && st.Warning != ""
	}
	if !warned {
		t.Errorf("HEALTHCHECK not reported as ignored: %+v", res.Steps)
	}
	c := res.Image.Config
	if c == nil || c.WorkingDir != "/home/user/work" || c.User != "user" || !slices.Equal(c.Cmd, []string{"greet", "world"}) ||
		!slices.Contains(c.Env, "APP_HOME=/srv/app") || !slices.Equal(c.ExposedPorts, []string{"8080/tcp"}) || c.Labels["org.example.task"] != "t1" {
		t.Fatalf("image config %+v", c)
	}
	if slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "GREETING=") }) {
		t.Errorf("a build ARG leaked into the image's env: %q", c.Env)
	}

	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: "app"})
	if err != nil {
		t.Fatal(err)
	}
	for script, want := range map[string]string{
		"pwd":                                     "/home/user/work",
		"id -un":                                  "user",
		"echo $APP_HOME":                          "/srv/app",
		"echo x${GREETING}x":                      "xx",
		"cat /srv/app/hello.txt":                  "hello file",
		"cat /srv/app/sub/x.txt":                  "nested",
		"cat /srv/app/built.txt":                  "hello from root",
		"cat /home/user/who.txt":                  "as user in /srv/app",
		"test -d /data && echo y":                 "y",
		"stat -c '%U:%G %a' /usr/local/bin/greet": "user:user 755",
		"stat -c '%U %a' /srv/app/hello.txt":      "root 644",
		"greet world":                             "greetings, world",
	} {
		if got := exec(t, d, sb.ID, script); got != want {
			t.Errorf("%s: %q, want %q", script, got, want)
		}
	}
	if err := d.Manager.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	// The same build again: every layer step from the cache, the same layers.
	t0 = time.Now()
	again, err := buildIn(t, d, "app", dir, appDockerfile, map[string]string{"GREETING": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	cached := time.Since(t0)
	noSandboxes(t, d)
	if again.CacheHits != again.LayerSteps || again.LayerSteps != 5 {
		t.Fatalf("rebuild: %d of %d layer steps from the cache", again.CacheHits, again.LayerSteps)
	}
	if !slices.Equal(layerDigests(res.Image), layerDigests(again.Image)) {
		t.Fatalf("rebuild layers %v, first build %v", layerDigests(again.Image), layerDigests(res.Image))
	}
	t.Logf("build time: cold %.2fs, cached %.3fs (%d steps)", cold.Seconds(), cached.Seconds(), len(res.Steps))

	// A changed build arg redoes the RUN that reads it and what follows, not the COPYs.
	argRes, err := buildIn(t, d, "app-arg", dir, appDockerfile, map[string]string{"GREETING": "hey"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cachedSteps(argRes); !slices.Equal(got, []bool{true, true, false, false, false}) {
		t.Fatalf("changed build arg: cached layer steps %v", got)
	}
	// A changed context file redoes its COPY and what follows only.
	writeFiles(t, dir, map[string]string{"greet.sh": "#!/bin/sh\necho \"hi, $1\"\n"})
	changed, err := buildIn(t, d, "app2", dir, appDockerfile, map[string]string{"GREETING": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cachedSteps(changed); !slices.Equal(got, []bool{true, false, false, false, false}) {
		t.Fatalf("changed greet.sh: cached layer steps %v, want only the first COPY cached", got)
	}

	// Multi-stage: COPY --from an earlier stage (by name and by index),
	// owned by root as Docker does.
	multi := `FROM debian AS tools
RUN mkdir -p /out/bin && printf '#!/bin/sh\necho tool\n' > /out/bin/tool && chmod 755 /out/bin/tool && echo data > /out/data.txt && chown -R user /out
FROM app
COPY --from=tools /out/ /opt/
COPY --from=0 /out/data.txt /etc/data.txt
`
	if _, err := buildIn(t, d, "multi", dir, multi, nil); err != nil {
		t.Fatal(err)
	}
	noSandboxes(t, d)
	sb, err = d.Manager.Create(ctx, api.CreateSandboxRequest{Image: "multi"})
	if err != nil {
		t.Fatal(err)
	}
	if got := exec(t, d, sb.ID, "/opt/bin/tool; cat /etc/data.txt; stat -c '%U %a' /opt/bin/tool /etc/data.txt; id -un"); got != "tool\ndata\nroot 755\nroot 644\nuser" {
		t.Errorf("multi-stage result: %q", got)
	}
	_ = d.Manager.Delete(ctx, sb.ID)

	// Through /v1 and the Go client: the context as a tar, the Dockerfile inside it.
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	cl := client.New(srv.URL, "test")
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM app\nCOPY app/hello.txt /etc/motd\nENV VIA=api\n"})
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(build.WriteContext(pw, dir, nil)) }()
	apiRes, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "app-api"}, pr)
	if err != nil {
		t.Fatal(err)
	}
	if apiRes.LayerSteps != 1 || !slices.Contains(apiRes.Image.Config.Env, "VIA=api") || apiRes.Image.Config.User != "user" {
		t.Fatalf("/v1 build: %+v", apiRes)
	}
	sb, err = cl.Create(ctx, api.CreateSandboxRequest{Image: "app-api"})
	if err != nil {
		t.Fatal(err)
	}
	if got := exec(t, d, sb.ID, "cat /etc/motd; echo $VIA"); got != "hello file\napi" {
		t.Fatalf("sandbox of the /v1 build: %q", got)
	}
	_ = cl.Delete(ctx, sb.ID)
	// A failing RUN through /v1: invalid_argument with the line, no image.
	pr, pw = io.Pipe()
	go func() {
		pw.CloseWithError(build.WriteContext(pw, dir, map[string][]byte{"Dockerfile": []byte("FROM app\nRUN false\n")}))
	}()
	_, err = cl.BuildImage(ctx, api.BuildImageRequest{Name: "app-bad"}, pr)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, "line 2") {
		t.Fatalf("failing RUN through /v1: %v", err)
	}
}

func layerDigests(img api.Image) []string {
	var out []string
	for _, l := range img.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// cachedSteps lists, for each layer step, whether it came from the cache.
func cachedSteps(res api.BuildImageResult) []bool {
	var out []bool
	for _, st := range res.Steps {
		if st.Layer != "" {
			out = append(out, st.Cached)
		}
	}
	return out
}

// TestBuildErrors: bad input is invalid_argument naming the Dockerfile line,
// and leaves no image of the name and no sandbox.
func TestBuildErrors(t *testing.T) {
	d := startNode(t)
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ok.txt": "ok\n"})
	if err := os.Symlink("/etc/shadow", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dockerfile string
		code             api.Code
		want             []string
	}{
		{"syntax", "FROM debian\nCOPY ok.txt\n", api.CodeInvalidArgument, []string{"line 2", "COPY"}},
		{"unknown", "FROM debian\nFROBNICATE x\n", api.CodeInvalidArgument, []string{"line 2", "unknown instruction"}},
		{"no-from", "RUN true\n", api.CodeInvalidArgument, []string{"line 1", "before the first FROM"}},
		{"missing-file", "FROM debian\nRUN true\nCOPY nothere.txt /x\n", api.CodeInvalidArgument, []string{"line 3", "not found in the build context"}},
		{"outside", "FROM debian\nCOPY ../etc/passwd /x\n", api.CodeInvalidArgument, []string{"line 2", "outside the build context"}},
		{"symlink-out", "FROM debian\nCOPY escape /x\n", api.CodeInvalidArgument, []string{"line 2", "inside the build context"}},
		{"failing-run", "FROM debian\nCOPY ok.txt /ok.txt\nRUN echo some output; echo boom >&2; exit 3\nRUN true\n", api.CodeInvalidArgument,
			[]string{"line 3", "exited with code 3", "boom"}},
		{"onbuild", "FROM debian\nONBUILD RUN true\n", api.CodeInvalidArgument, []string{"line 2", "ONBUILD is not supported"}},
		{"run-mount", "FROM debian\nRUN --mount=type=cache,target=/c true\n", api.CodeInvalidArgument, []string{"line 2", "RUN --mount"}},
		{"add-url", "FROM debian\nADD https://example.com/x /x\n", api.CodeInvalidArgument, []string{"line 2", "remote sources"}},
		{"copy-from-unknown", "FROM debian AS a\nFROM debian\nCOPY --from=b /etc/hostname /x\n", api.CodeInvalidArgument, []string{"line 3", "no earlier stage"}},
		{"copy-from-missing", "FROM debian AS a\nFROM debian\nCOPY --from=a /no/such /x\n", api.CodeInvalidArgument, []string{"line 3", "not found in that stage"}},
		{"no-image", "FROM no-such-image-here\n", api.CodeNotFound, []string{"line 1", "no-such-image-here"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "bad-" + c.name
			_, err := buildIn(t, d, name, dir, c.dockerfile, nil)
			if errdefs.CodeOf(err) != c.code {
				t.Fatalf("code %s (%v), want %s", errdefs.CodeOf(err), err, c.code)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := d.Manager.Image(ctx, name); !errdefs.Is(err, api.CodeNotFound) {
				t.Errorf("image %s after the failed build: %v", name, err)
			}
			noSandboxes(t, d)
		})
	}
	// A directory image's name cannot be a build's.
	if _, err := buildIn(t, d, "debian", dir, "FROM debian\n", nil); errdefs.CodeOf(err) != api.CodeAlreadyExists {
		t.Fatalf("build into the debian directory image's name: %v", err)
	}
}
