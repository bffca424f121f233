package e2b

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/pkg/api"
)

func ptr[T any](v T) *T { return &v }

func step(typ string, args ...string) e2bapi.TemplateStep {
	return e2bapi.TemplateStep{Type: typ, Args: &args}
}

func TestTranslateTemplate(t *testing.T) {
	copyStep := step("COPY", "app/", "/opt/app", "user", "0755")
	copyStep.FilesHash = ptr("abc123")
	spec := e2bapi.TemplateBuildStartV2{
		FromTemplate: ptr("debian"),
		StartCmd:     ptr(`python -m http.server "8000"`),
		ReadyCmd:     ptr("curl -s localhost:8000 >/dev/null"),
		Steps: &[]e2bapi.TemplateStep{
			step("RUN", "apt-get update\necho $HOME"),
			copyStep,
			step("ENV", "A", `x "y" $z \w`, "B", ""),
			step("WORKDIR", "/opt/my app"),
			step("USER", "user"),
			step("RUN", "whoami", "root"),
			step("RUN", "id", "user"),
		},
	}
	tr, err := translateTemplate(spec, templateFrom{image: "debian", named: "debian"}, "my-tpl", "b-1")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`FROM debian`,
		`RUN ["/bin/sh","-c","apt-get update\necho $HOME"]`,
		`COPY --chown=user --chmod=0755 ["files/abc123/app","/opt/app"]`,
		`ENV A="x \"y\" \$z \\w" B=""`,
		`WORKDIR "/opt/my app"`,
		`USER user`,
		`USER root`,
		`RUN ["/bin/sh","-c","whoami"]`,
		`USER user`,
		`RUN ["/bin/sh","-c","id"]`,
		`LABEL dev.dsec.e2b.template="my-tpl" dev.dsec.e2b.build="b-1" dev.dsec.e2b.start-cmd="python -m http.server \"8000\"" dev.dsec.e2b.ready-cmd="curl -s localhost:8000 >/dev/null"`,
	}, "\n") + "\n"
	if tr.dockerfile != want {
		t.Errorf("Dockerfile:\n%s\nwant:\n%s", tr.dockerfile, want)
	}
	if len(tr.files) != 1 || tr.files[0] != "abc123" {
		t.Errorf("files = %v", tr.files)
	}
	// Lines map back to E2B's steps: the SDK shows the call that made them.
	for line, st := range map[int]string{1: "base", 2: "1", 3: "2", 8: "6", 9: "6", 10: "7", 11: "finalize"} {
		if tr.steps[line] != st {
			t.Errorf("line %d is step %q, want %q", line, tr.steps[line], st)
		}
	}
	stepN, msg := tr.explain(errdefs.Invalid("Dockerfile line 8: RUN [\"/bin/sh\",\"-c\",\"whoami\"] exited with code 1:\nboom"))
	if stepN != "6" || msg != "step 6 (runCmd(\"whoami\")): exited with code 1:\nboom" {
		t.Errorf("explain = %q, %q", stepN, msg)
	}
	if s, m := tr.explain(errdefs.Invalid("Dockerfile line 1: FROM debian: not found")); s != "base" || !strings.Contains(m, "not found") {
		t.Errorf("explain FROM = %q, %q", s, m)
	}
	denied := fmt.Errorf("Dockerfile line 1: FROM r.example/a:1: %w", errdefs.New(api.CodePermissionDenied, "registry r.example refused r.example/a:1 (credentials missing or wrong)"))
	if s, m := tr.explain(denied); s != "base" || !strings.HasPrefix(m, "permission_denied: step base") || !strings.Contains(m, "refused") {
		t.Errorf("explain a refused FROM = %q, %q; want step base, permission_denied first", s, m)
	}
}

func TestTranslateTemplateDefaults(t *testing.T) {
	// No steps, no start command: FROM the base and the labels.
	tr, err := translateTemplate(e2bapi.TemplateBuildStartV2{}, templateFrom{image: "debian", user: "user"}, "t", "b")
	if err != nil {
		t.Fatal(err)
	}
	if want := "FROM debian\nLABEL dev.dsec.e2b.template=\"t\" dev.dsec.e2b.build=\"b\"\n"; tr.dockerfile != want {
		t.Errorf("Dockerfile %q, want %q", tr.dockerfile, want)
	}
	// A RUN as root in an image whose user is "user" goes back to "user".
	tr, err = translateTemplate(e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("RUN", "x", "root")}},
		templateFrom{image: "debian", user: "user"}, "t", "b")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.dockerfile, "USER root\nRUN [\"/bin/sh\",\"-c\",\"x\"]\nUSER user\n") {
		t.Errorf("Dockerfile %q", tr.dockerfile)
	}
	for name, base := range map[string]*string{"base": ptr("base"), "e2bdev/base": ptr("e2bdev/base"), "none": nil} {
		got, err := templateBase(e2bapi.TemplateBuildStartV2{FromImage: base})
		if err != nil || got != "" {
			t.Errorf("%s: base %q, %v; want the default", name, got, err)
		}
	}
}

func TestTranslateTemplateBadSteps(t *testing.T) {
	noHash := step("COPY", "a", "/a")
	absCopy := step("COPY", "/etc/passwd", "/a")
	absCopy.FilesHash = ptr("h")
	upCopy := step("COPY", "../x", "/a")
	upCopy.FilesHash = ptr("h")
	badHash := step("COPY", "a", "/a")
	badHash.FilesHash = ptr("../../etc")
	badMode := step("COPY", "a", "/a", "", "rwx")
	badMode.FilesHash = ptr("h")
	for name, c := range map[string]struct {
		spec e2bapi.TemplateBuildStartV2
		want string
	}{
		"unknown type":      {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("VOLUME", "/x")}}, "step 1 (VOLUME): unknown step type"},
		"run no args":       {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("RUN")}}, "step 1 (RUN): want a command"},
		"run bad user":      {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("RUN", "x", "a b")}}, `invalid user "a b"`},
		"copy no hash":      {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{noHash}}, "no valid filesHash"},
		"copy bad hash":     {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{badHash}}, "no valid filesHash"},
		"copy absolute":     {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{absCopy}}, "must be a path inside"},
		"copy up":           {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{upCopy}}, "must be a path inside"},
		"copy mode":         {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{badMode}}, `mode "rwx" is not octal`},
		"env odd":           {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("ENV", "A")}}, "KEY, VALUE pairs"},
		"env key":           {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("ENV", "A-B", "1")}}, `invalid variable name "A-B"`},
		"env newline":       {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("ENV", "A", "1\n2")}}, "line breaks"},
		"user two":          {e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("USER", "a", "b")}}, "want one user"},
		"ready, no start":   {e2bapi.TemplateBuildStartV2{ReadyCmd: ptr("true")}, "setStartCmd first"},
		"start newline":     {e2bapi.TemplateBuildStartV2{StartCmd: ptr("a\nb")}, "start-cmd: line breaks"},
		"registry creds":    {e2bapi.TemplateBuildStartV2{FromTemplate: ptr("x"), FromImageRegistry: &e2bapi.FromImageRegistry{}}, "come with fromImage"},
		"two bases":         {e2bapi.TemplateBuildStartV2{FromImage: ptr("x"), FromTemplate: ptr("y")}, "one base"},
		"base not a ref":    {e2bapi.TemplateBuildStartV2{FromImage: ptr("x $(id)")}, "not an image reference"},
		"base with a quote": {e2bapi.TemplateBuildStartV2{FromTemplate: ptr(`x"`)}, "not an image reference"},
	} {
		_, err := templateBase(c.spec)
		if err == nil {
			_, err = translateTemplate(c.spec, templateFrom{image: "debian"}, "t", "b")
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument with %q", name, err, c.want)
		}
	}
}

func TestUploadPaths(t *testing.T) {
	for name, want := range map[string]string{"a": "a", "./a/b": "a/b", "a/../b": "b", ".": "", "./": ""} {
		if got, ok := inside(name); !ok || got != want {
			t.Errorf("inside(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"../a", "/etc/passwd", "a/../../b", "", "a\x00"} {
		if _, ok := inside(name); ok {
			t.Errorf("inside(%q) accepted", name)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	// COPY folder/* dest: each match's file by name, a directory's contents.
	for name, want := range map[string]string{
		"folder/test.txt":   "test.txt",
		"folder/sub":        "sub",
		"folder/sub/x.txt":  "sub/x.txt",
		"folder/sub/y/z":    "sub/y/z",
		"other/test.txt":    "",
		"folder":            "",
		"folderx/test.txt":  "",
		"folder/.hidden.sh": ".hidden.sh",
	} {
		got, ok := globMatch("folder/*", name)
		if ok != (want != "") || got != want {
			t.Errorf("globMatch(folder/*, %q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestWriteBuildContext(t *testing.T) {
	up := filepath.Join(t.TempDir(), "h.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "folder/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "folder/test.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
		{Name: "folder/abs.txt", Typeflag: tar.TypeSymlink, Linkname: "/tmp/elsewhere/test.txt"},
		{Name: "folder/hard.txt", Typeflag: tar.TypeLink, Linkname: "folder/test.txt"},
		{Name: "folder/sub/x", Typeflag: tar.TypeReg, Mode: 0o600},
		{Name: "top.txt", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("hi"))
		}
	}
	_ = tw.Close()
	if err := os.WriteFile(up, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeBuildContext(&out, "FROM x\n", []string{"h"}, func(string) (io.ReadCloser, error) { return os.Open(up) }, []templateGlob{{hash: "h", pattern: "folder/*"}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got[h.Name] = string(h.Typeflag) + ">" + h.Linkname
	}
	want := map[string]string{
		"Dockerfile": "0>", "files/h/": "5>", "files/h/folder/": "5>", "files/h/folder/test.txt": "0>",
		"files/h/folder/abs.txt": "2>/tmp/elsewhere/test.txt", "files/h/folder/hard.txt": "1>files/h/folder/test.txt",
		"files/h/folder/sub/x": "0>", "files/h/top.txt": "0>",
		// The matches of folder/*, links kept as links.
		"globs/0/": "5>", "globs/0/test.txt": "0>", "globs/0/abs.txt": "2>/tmp/elsewhere/test.txt",
		"globs/0/hard.txt": "1>files/h/folder/test.txt", "globs/0/x": "0>",
	}
	if !maps.Equal(got, want) {
		t.Errorf("context:\n%v\nwant\n%v", got, want)
	}
}
