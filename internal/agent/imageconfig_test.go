package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestImageConfigDefaults: an image's config (here from image.json) gives every
// exec its base env (PATH included), cwd and user; the sandbox's create env
// and the request's env, cwd and user override them; a sandbox keeps the config
// it was created with across a change of the image and an agent restart.
func TestImageConfigDefaults(t *testing.T) {
	e := newEnv(t)
	deb, err := e.store.Resolve("")
	if err != nil || len(deb.Lower()) != 1 {
		t.Skipf("debian is not a one-directory image: %v", err)
	}
	dir := t.TempDir()
	write := func(c *image.Config) {
		t.Helper()
		os.MkdirAll(filepath.Join(dir, "cfg"), 0o755)
		m := image.Manifest{Name: "cfg", Layers: []image.Layer{{Dir: deb.Lower()[0]}}, Config: c}
		if _, err := image.WriteManifest(filepath.Join(dir, "cfg", image.ManifestFile), m); err != nil {
			t.Fatal(err)
		}
	}
	write(&image.Config{Env: []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "JAVA_HOME=/opt/jdk"}, WorkingDir: "/tmp", User: "1000",
		Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-l"}})
	store := &image.Store{Dir: dir, Default: "cfg"}
	withStore := func(c *agent.Config) { c.Images = store }
	m := e.open(t, withStore)

	const probe = `echo $PATH $JAVA_HOME; pwd; id -u`
	a := create(t, m, api.CreateSandboxRequest{})
	if got := shOK(t, m, a.ID, probe); got != "/opt/tool/bin:/usr/bin:/bin /opt/jdk\n/tmp\n1000\n" {
		t.Errorf("image defaults: %q", got)
	}
	res := execOK(t, m, a.ID, api.ExecRequest{Shell: probe, Env: map[string]string{"PATH": "/bin:/usr/bin"}, Cwd: "/", User: "root"})
	if res.Stdout != "/bin:/usr/bin /opt/jdk\n/\n0\n" {
		t.Errorf("request overrides: %+v", res)
	}
	b := create(t, m, api.CreateSandboxRequest{Env: map[string]string{"JAVA_HOME": "/from/create"}})
	if got := shOK(t, m, b.ID, `echo $JAVA_HOME`); got != "/from/create\n" {
		t.Errorf("create env over the image's: %q", got)
	}
	img, err := m.Image(ctxT(t), "cfg")
	if err != nil || img.Config == nil || img.Config.User != "1000" || len(img.Config.Entrypoint) != 1 || img.Config.Cmd[0] != "-l" {
		t.Errorf("GET image: %+v %v", img, err)
	}
	var rc image.Config
	if err := json.Unmarshal(e.recordOf(t, a.ID)["image_config"], &rc); err != nil || rc.WorkingDir != "/tmp" {
		t.Errorf("record's image_config: %+v %v", rc, err)
	}

	// The image changes: new sandboxes get the new config, running ones keep theirs,
	// also after the agent restarts.
	write(&image.Config{Env: []string{"JAVA_HOME=/opt/jdk21"}})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := e.open(t, withStore)
	if got := shOK(t, m2, a.ID, probe); got != "/opt/tool/bin:/usr/bin:/bin /opt/jdk\n/tmp\n1000\n" {
		t.Errorf("running sandbox after the image changed and the agent restarted: %q", got)
	}
	c := create(t, m2, api.CreateSandboxRequest{})
	if got := shOK(t, m2, c.ID, probe); got != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /opt/jdk21\n/root\n0\n" {
		t.Errorf("new sandbox on the changed image: %q", got)
	}
}
